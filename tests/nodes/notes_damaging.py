"""Nodes of tests/e2e/test_integrity_notes.py (DAMAGING_NODES)."""

import glob

from graphbook.steps import SourceStep, Step


class Emit(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"i": i} for i in range(3)]}


class Damage(Step):
    """Cuts its parent's stored notes in half once it has read them (a disk fault)."""

    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"pattern": {"type": "string", "default": ""}}

    def __init__(self, pattern=""):
        super().__init__()
        self.pattern = pattern

    def on_end(self):
        for path in glob.glob(self.pattern, recursive=True):
            data = open(path, "rb").read()
            open(path, "wb").write(data[: len(data) // 2])
