"""Nodes of tests/e2e/test_reliability_inputs.py (POOL_NODES)."""

from graphbook.steps import BatchStep, SourceStep


class Items(SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{"items": [f"i{k}" for k in range(4)]}]}


class Load(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 2},
        "item_key": {"type": "string", "default": "items"},
    }

    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        return item

    def dump_fn(self, item):
        return None

    def on_item_batch(self, outputs, items, notes):
        return None
