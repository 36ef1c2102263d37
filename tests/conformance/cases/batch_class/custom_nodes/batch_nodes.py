from graphbook import param, source, step
from graphbook.core.steps import BatchStep


@step("Items")
@source()
@param("count", type="number", default=3)
def items(ctx):
    for i in range(ctx.count):
        yield {"out": {"i": i, "items": list(range(i + 1))}}


class SquareBatch(BatchStep):
    RequiresInput = True
    Parameters = {
        "batch_size": {"type": "number", "default": 8},
        "item_key": {"type": "string", "default": "items"},
    }
    Outputs = ["out"]
    Category = "Batch"

    def __init__(self, batch_size, item_key):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        return item * item

    @staticmethod
    def dump_fn(path, value):
        pass

    def on_item_batch(self, outputs, items, datas):
        for out, data in zip(outputs, datas):
            data.setdefault("squares", []).append(out)
        return None
