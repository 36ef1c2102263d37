"""Nodes of tests/defs/test_executor.py (NODES)."""

from graphbook.steps import BatchStep, SourceStep


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"n": {"type": "number", "default": 6}}

    def __init__(self, n=6):
        super().__init__()
        self.n = int(n)

    def load(self):
        return {"out": [{"i": i, "items": [i]} for i in range(self.n)]}


class Tenfold(BatchStep):
    Outputs = ["out"]
    Parameters = {"batch_size": {"type": "number", "default": 2}}

    def __init__(self, batch_size=2):
        super().__init__(batch_size, "items")

    @staticmethod
    def load_fn(item):
        return item * 10

    def on_item_batch(self, outputs, items, notes):
        for note, out in zip(notes, outputs):
            note["tenfold"] = int(out)
