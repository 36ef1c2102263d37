"""The functional pokemon/segmentation sources' shape: a @source that yields bare note dicts."""

from graphbook import param, source, step


@step("LoadImageDataset")
@source()
@param("count", type="number", default=2)
def load_image_dataset(ctx):
    for i in range(ctx.count):
        yield {"name": f"img{i}", "image": {"type": "image", "value": f"img{i}.png"}}


@step("Label")
def label(ctx, data):
    data["label"] = data["name"].upper()
