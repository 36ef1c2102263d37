"""Nodes of tests/e2e/test_integrity_signals.py (KILLED_NODES)."""

import time

from graphbook.steps import BatchStep, SourceStep


class Items(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"items": [f"i{k}" for k in range(4)]}]}


class Slow(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 2},
        "item_key": {"type": "string", "default": "items"},
        "sleep_s": {"type": "number", "default": 0},
    }

    def __init__(self, batch_size=2, item_key="items", sleep_s=0):
        super().__init__(batch_size, item_key)
        self.load_fn_params = {"sleep_s": sleep_s}

    @staticmethod
    def load_fn(item, sleep_s):
        print("LOADING", item, flush=True)
        time.sleep(sleep_s)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None
