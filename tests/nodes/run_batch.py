"""Nodes of tests/runner/test_run.py (BATCH_NODES)."""

from graphbook.steps import BatchStep, SourceStep


class Items(SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{"items": [f"item-{i}"]} for i in range(3)]}


class Check(BatchStep):
    """``load_fn`` fails for item 1: 1 of the 3 items."""

    RequiresInput = True
    Outputs = ["out"]

    def __init__(self):
        super().__init__(batch_size=1, item_key="items")

    @staticmethod
    def load_fn(item):
        if item == "item-1":
            raise ValueError(f"bad item {item}")
        return item

    def on_item_batch(self, outputs, items, notes):
        return None
