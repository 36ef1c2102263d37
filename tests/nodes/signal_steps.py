"""Nodes of tests/e2e/test_integrity_signals.py (NODES)."""

import time

from graphbook.steps import BatchStep, SourceStep


class Items(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"items": [f"i{k}" for k in range(4)]}]}


class Stuck(BatchStep):
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
        print("LOADING", item, flush=True)
        time.sleep(3600)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None
