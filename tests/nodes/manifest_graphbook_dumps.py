"""Nodes of tests/e2e/test_integrity_manifest.py (GRAPHBOOK_DUMPS)."""

import os

from dagster_graphbook.authoring.files import atomic_path
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


class SaveViaHelper(BatchStep):
    """Graphbook style: dump_fn returns nothing; it writes through atomic_path."""

    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"out_dir": {"type": "string", "default": ""}}

    def __init__(self, out_dir=""):
        super().__init__(2, "name")
        self.out_dir = out_dir

    @staticmethod
    def dump_fn(name, folder):
        with atomic_path(os.path.join(folder, name + ".txt")) as tmp:
            with open(tmp, "w") as f:
                f.write(name * 2)

    def on_item_batch(self, outputs, items, notes):
        return [(item, self.out_dir) for item in items]


class SavePlain(SaveViaHelper):
    """dump_fn returns nothing and writes with open(): nothing to record."""

    @staticmethod
    def dump_fn(name, folder):
        with open(os.path.join(folder, name + ".plain"), "w") as f:
            f.write(name)
