"""The Load Images guide's code blocks (docs/packages/core/guides/load-images.rst).

``os.walk``'s order is the file system's; each source sorts ``dirs`` and ``files`` so the run is
reproducible. The guide's class forms import ``graphbook.steps`` (absent from 0.13.3, case
``docs_imports``); here ``graphbook.core.steps``.
"""

import os.path

from graphbook import param, source, step, utils
from graphbook.core.steps import GeneratorSourceStep, SourceStep


def _walk(top):
    for root, dirs, files in os.walk(top):
        dirs.sort()
        yield root, dirs, sorted(files)


@step("ImageSource")
@source()
@param("img_path", "string", default="path/to/images")
def image_source(ctx):
    for root, _dirs, files in _walk(ctx.img_path):
        for file in files:
            yield {"out": {"img": utils.image(os.path.join(root, file))}}


@step("ImageSourceAll")
@source(False)
@param("img_path", "string", default="path/to/images")
def image_source_all(ctx):
    images = {"out": []}
    for root, _dirs, files in _walk(ctx.img_path):
        for file in files:
            images["out"].append({"img": utils.image(os.path.join(root, file))})
    return images


@step("ImageArray")
@source()
@param("img_path", "string", default="path/to/images")
def image_array(ctx):
    for root, _dirs, files in _walk(ctx.img_path):
        if files:
            yield {"out": {"images": [utils.image(os.path.join(root, file)) for file in files]}}


class ImageSourceClass(GeneratorSourceStep):
    RequiresInput = False
    Parameters = {"img_path": {"type": "string", "default": "path/to/images"}}
    Outputs = ["out"]
    Category = ""

    def __init__(self, img_path):
        super().__init__()
        self.img_path = img_path

    def load(self):
        for root, _dirs, files in _walk(self.img_path):
            for file in files:
                yield {"out": {"img": utils.image(os.path.join(root, file))}}


class ImageSourceClassAll(SourceStep):
    RequiresInput = False
    Parameters = {"img_path": {"type": "string", "default": "path/to/images"}}
    Outputs = ["out"]
    Category = ""

    def __init__(self, img_path):
        super().__init__()
        self.img_path = img_path

    def load(self):
        images = {"out": []}
        for root, _dirs, files in _walk(self.img_path):
            for file in files:
                images["out"].append({"img": utils.image(os.path.join(root, file))})
        return images
