"""examples/workflows/python/ImageTransforms.py in shape: the transform classes in the workflow
file (pixel-grid stand-ins for torchvision), a Graph built with ``g.step``/``param``/``bind``.

The plugin import (``from graphbook_huggingface import HuggingfaceDataset``) is the one line
changed: an offline stand-in from custom_nodes. Normalize's ``std`` is left unset, so its
``__init__`` default applies.
"""

from transforms_hf_source import HuggingfaceDataset

import graphbook as gb
from graphbook import utils
from graphbook.core.steps import Step


class HorizontalFlip(Step):
    """Flips the image when p >= 0.5 (the example draws against p)."""

    RequiresInput = True
    Parameters = {"p": {"type": "number", "default": 0.5}}
    Outputs = ["out"]
    Category = "Transform"

    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def on_data(self, data: dict):
        if self.p >= 0.5:
            data["pixels"] = [list(reversed(row)) for row in data["pixels"]]
        data["img"] = utils.image(data["image"])
        self.log("Applied horizontal flip to image.")


class ResizedCrop(Step):
    """Crops to the first size[1] % 3 + 1 columns and records the settings it got."""

    RequiresInput = True
    Parameters = {
        "size": {"type": "array", "default": [224, 224]},
        "scale": {"type": "array", "default": [0.08, 1.0]},
        "ratio": {"type": "array", "default": [3.0 / 4.0, 4.0 / 3.0]},
    }
    Outputs = ["out"]
    Category = "Transform"

    def __init__(self, size=(224, 224), scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
        super().__init__()
        self.size = size
        self.scale = scale
        self.ratio = ratio

    def on_data(self, data: dict):
        width = self.size[1] % 3 + 1
        data["pixels"] = [row[:width] for row in data["pixels"]]
        data["crop"] = {"size": self.size, "scale": self.scale, "ratio": self.ratio}
        data["crop_types"] = [type(v).__name__ for v in (self.size, self.scale, self.ratio)]
        data["img"] = utils.image(data["img"]["value"])
        self.log("Applied random resized crop to image.")


class ColorJitter(Step):
    """Scales the pixels by 1 + brightness."""

    RequiresInput = True
    Parameters = {
        "brightness": {"type": "number", "default": 0.5},
        "contrast": {"type": "number", "default": 0.5},
        "saturation": {"type": "number", "default": 0.5},
        "hue": {"type": "number", "default": 0.5},
    }
    Outputs = ["out"]
    Category = "Transform"

    def __init__(self, brightness=0.5, contrast=0.5, saturation=0.5, hue=0.5):
        super().__init__()
        self.brightness = brightness
        self.contrast = contrast
        self.saturation = saturation
        self.hue = hue

    def on_data(self, data: dict):
        data["pixels"] = [[v * (1 + self.brightness) for v in row] for row in data["pixels"]]
        data["jitter"] = [self.brightness, self.contrast, self.saturation, self.hue]
        data["img"] = utils.image(data["img"]["value"])
        self.log("Applied color jitter to image.")


class Normalize(Step):
    """Normalizes each column c with mean[c] and std[c]."""

    RequiresInput = True
    Parameters = {
        "mean": {"type": "array", "default": [0.485, 0.456, 0.406]},
        "std": {"type": "array", "default": [0.229, 0.224, 0.225]},
    }
    Outputs = ["out"]
    Category = "Transform"

    def __init__(self, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]):  # noqa: B006
        super().__init__()
        self.mean = mean
        self.std = std

    def on_data(self, data: dict):
        data["norm"] = [
            [round((v / 255 - self.mean[c]) / self.std[c], 6) for c, v in enumerate(row)]
            for row in data["pixels"]
        ]
        self.log("Normalized image.")


g = gb.Graph()


@g()
def _():
    data_source = g.step(HuggingfaceDataset)
    horiz_flip = g.step(HorizontalFlip)
    resized_crop = g.step(ResizedCrop)
    color_jitter = g.step(ColorJitter)
    normalize = g.step(Normalize)

    data_source.param("dataset_id", "local/daisy-dog")
    data_source.param("split", "train")
    data_source.param("shuffle", False)
    data_source.param("log_data", True)
    data_source.param("kwargs", {})

    horiz_flip.param("p", 0.5)
    horiz_flip.bind(data_source, "out")

    resized_crop.param("size", [224, 224])
    resized_crop.param("scale", [0.08, 1.0])
    resized_crop.param("ratio", [3.0 / 4.0, 4.0 / 3.0])
    resized_crop.bind(horiz_flip, "out")

    color_jitter.param("brightness", 0.5)
    color_jitter.param("contrast", 0.5)
    color_jitter.param("saturation", 0.5)
    color_jitter.param("hue", 0.5)
    color_jitter.bind(resized_crop, "out")

    normalize.param("mean", [0.485, 0.456, 0.406])
    normalize.bind(color_jitter, "out")


if __name__ == "__main__":
    g.run()
