"""The functional image_transforms example's steps, on pixel grids instead of torchvision.

Each step keeps the example's shape (``@step("Transform/...")``, ``array`` and ``number``
parameters, ``utils.image`` around the result, ``ctx.log``, the note changed in place); the
random torchvision transforms are replaced by deterministic arithmetic.
"""

from graphbook import output, param, step, utils


@step("Transform/HorizontalFlip")
@param("p", type="number", default=0.5)
@output("out")
def horizontal_flip(ctx, data: dict):
    """Flips the image when p >= 0.5 (the example draws against p)."""
    if ctx.p >= 0.5:
        data["pixels"] = [list(reversed(row)) for row in data["pixels"]]
    data["img"] = utils.image(data["image"])
    ctx.log("Applied horizontal flip to image.")


@step("Transform/ResizedCrop")
@param("size", type="array", default=[224, 224])
@param("scale", type="array", default=[0.08, 1.0])
@param("ratio", type="array", default=[3.0 / 4.0, 4.0 / 3.0])
@output("out")
def resized_crop(ctx, data: dict):
    """Crops to the first size[1] % 3 + 1 columns and records the crop settings it got."""
    width = ctx.size[1] % 3 + 1
    data["pixels"] = [row[:width] for row in data["pixels"]]
    data["crop"] = {"size": ctx.size, "scale": ctx.scale, "ratio": ctx.ratio}
    data["img"] = utils.image(data["img"]["value"])
    ctx.log("Applied random resized crop to image.")


@step("Transform/ColorJitter")
@param("brightness", type="number", default=0.5)
@param("contrast", type="number", default=0.5)
@param("saturation", type="number", default=0.5)
@param("hue", type="number", default=0.5)
@output("out")
def color_jitter(ctx, data: dict):
    """Scales the pixels by 1 + brightness."""
    data["pixels"] = [[v * (1 + ctx.brightness) for v in row] for row in data["pixels"]]
    data["jitter"] = [ctx.brightness, ctx.contrast, ctx.saturation, ctx.hue]
    data["img"] = utils.image(data["img"]["value"])
    ctx.log("Applied color jitter to image.")


@step("Transform/Normalize")
@param("mean", type="array", default=[0.485, 0.456, 0.406])
@param("std", type="array", default=[0.229, 0.224, 0.225])
@output("out")
def normalize(ctx, data: dict):
    """Normalizes each column c with mean[c] and std[c]."""
    data["norm"] = [
        [round((v / 255 - ctx.mean[c]) / ctx.std[c], 6) for c, v in enumerate(row)]
        for row in data["pixels"]
    ]
    ctx.log("Normalized image.")
