"""Nodes of tests/e2e/test_resume.py (NODES)."""

import os
import time

from graphbook.steps import BatchStep, SourceStep


class Items(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"counter": {"type": "string", "default": ""}}

    def __init__(self, counter=""):
        super().__init__()
        self.counter = counter

    def load(self):
        with open(self.counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        return {
            "out": [
                {"items": [f"n{n}i{k}" for k in range(10)], "by": os.getpid()} for n in range(4)
            ]
        }


class Slow(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 2},
        "item_key": {"type": "string", "default": "items"},
        "sleep_s": {"type": "number", "default": 0},
        "marker": {"type": "string", "default": ""},
    }

    def __init__(self, batch_size=2, item_key="items", sleep_s=0, marker=""):
        super().__init__(batch_size, item_key)
        self.load_fn_params = {"sleep_s": sleep_s, "marker": marker}

    @staticmethod
    def load_fn(item, sleep_s, marker):
        print("LOADING", item, flush=True)
        if marker and os.path.exists(marker):
            raise RuntimeError("the marker file is there")
        time.sleep(sleep_s)
        return item

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note.setdefault("loaded", []).append(out)
            note["day"] = getattr(self, "partition_key", None)
