"""Nodes of tests/e2e/test_integrity_notes.py (RELINEAGE_NODES)."""

import os

from graphbook.steps import SourceStep, Step


class Emit(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"tag": {"type": "string", "default": "a"}}

    def __init__(self, tag="a"):
        super().__init__()
        self.tag = tag

    def load(self):
        return {"out": [{"tag": self.tag, "i": i} for i in range(3)]}


class Check(Step):
    """Fails while ``marker`` exists; records the tags it saw in ``seen``."""

    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "marker": {"type": "string", "default": ""},
        "seen": {"type": "string", "default": ""},
    }

    def __init__(self, marker="", seen=""):
        super().__init__()
        self.marker, self.seen = marker, seen

    def on_data(self, data):
        if self.marker and os.path.exists(self.marker):
            raise RuntimeError("transient failure")
        with open(self.seen, "a") as f:
            f.write(data["tag"] + "\n")
