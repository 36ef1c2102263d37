"""The class-based image_segmentation/pokemon shape on numbers: a source of item lists, a
BatchStep with @staticmethod load_fn and a dump_fn writing one file per item, then Split."""

import os

from graphbook.core.steps import BatchStep, SourceStep


class LoadDataset(SourceStep):
    RequiresInput = False
    Parameters = {"count": {"type": "number", "default": 3}}
    Outputs = ["out"]
    Category = "Custom"

    def __init__(self, count):
        super().__init__()
        self.count = count

    def load(self):
        notes = [
            {"name": f"n{i}", "items": [{"value": i * 10 + k} for k in range(i + 1)]}
            for i in range(self.count)
        ]
        return {"out": notes}


class Square(BatchStep):
    RequiresInput = True
    Parameters = {
        "batch_size": {"type": "number", "default": 2},
        "item_key": {"type": "string", "default": "items"},
        "output_dir": {"type": "string", "default": "out"},
    }
    Outputs = ["out"]
    Category = "Custom"

    def __init__(self, batch_size, item_key, output_dir):
        super().__init__(batch_size, item_key)
        self.output_dir = output_dir

    @staticmethod
    def load_fn(item):
        return item["value"] * item["value"]

    @staticmethod
    def dump_fn(path, value):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(str(value))

    def on_item_batch(self, outputs, items, datas):
        dumps = []
        for out, item, data in zip(outputs, items, datas):
            data.setdefault("squares", []).append(out)
            dumps.append((os.path.join(self.output_dir, f"{item['value']}.txt"), out))
        return dumps
