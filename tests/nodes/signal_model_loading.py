"""Nodes of tests/e2e/test_integrity_signals.py (LOADING_MODEL_NODES)."""

import os
import time

from graphbook.resources import Resource
from graphbook.steps import BatchStep, SourceStep


class Model(Resource):
    Parameters = {
        "load_s": {"type": "number", "default": 0},
        "marker": {"type": "string", "default": ""},
    }

    def __init__(self, load_s=0, marker=""):
        super().__init__()
        self.load_s, self.marker = load_s, marker

    def value(self):  # built in the step process, before the step's body (a big model)
        with open(self.marker + ".loading", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(self.load_s)
        return "model"


class Items(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"items": ["i0", "i1"]}]}


class Infer(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "model": {"type": "resource"},
        "marker": {"type": "string", "default": ""},
        "batch_size": {"type": "number", "default": 2},
        "item_key": {"type": "string", "default": "items"},
    }

    def __init__(self, model, marker="", batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)
        self.marker = marker

    def on_item_batch(self, outputs, items, notes):  # the GPU work
        with open(self.marker + ".ran", "w") as f:
            f.write(str(os.getpid()))
