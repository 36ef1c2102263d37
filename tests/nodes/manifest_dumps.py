"""Nodes of tests/e2e/test_integrity_manifest.py (NODES)."""

import os

from graphbook.steps import BatchStep, SourceStep


class Names(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"count": {"type": "number", "default": 3}}

    def __init__(self, count=3):
        super().__init__()
        self.count = int(count)

    def load(self):
        return {"out": [{"name": f"img_{i}"} for i in range(self.count)]}


class Save(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"out_dir": {"type": "string", "default": ""}}

    def __init__(self, out_dir=""):
        super().__init__(2, "name")
        self.out_dir = out_dir

    @staticmethod
    def dump_fn(name, folder):
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name + ".txt")
        with open(path, "w") as f:
            f.write(name)
        return path

    def on_item_batch(self, outputs, items, notes):
        return [(item, self.out_dir) for item in items]
