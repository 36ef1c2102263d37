"""Nodes of tests/e2e/test_reliability_inputs.py (IMAGE_NODES)."""

import json

from PIL import Image
from torchvision.transforms.functional import pil_to_tensor

from graphbook import batch, param, source, step


@step("Rel/Manifest")
@source()
@param("manifest", "string")
def manifest(ctx):
    with open(ctx.manifest) as f:
        for note in json.load(f):
            yield {"out": note}


def load_image(ctx, item):
    with Image.open(item) as img:
        return pil_to_tensor(img.convert("RGB"))


@step("Rel/ImageSizes")
@batch(3, "paths", load_fn=load_image)
def image_sizes(ctx, outputs, items, notes):
    for tensor, path, note in zip(outputs, items, notes):
        note.setdefault("sizes", {})[str(path)] = list(tensor.shape)


def load_number(ctx, item):
    if item == 637:
        raise ValueError(f"cannot load {item}")
    return item * 10


@step("Rel/Numbers")
@batch(16, "items", load_fn=load_number)
def numbers(ctx, outputs, items, notes):
    for out, note in zip(outputs, notes):
        note.setdefault("loaded", []).append(out)
