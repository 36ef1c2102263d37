"""Nodes of tests/e2e/test_integrity_notes.py (NODES)."""

import os
import time

from graphbook.steps import SourceStep, Step


class Emit(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {
        "tag": {"type": "string", "default": "a"},
        "count": {"type": "number", "default": 3},
    }

    def __init__(self, tag="a", count=3):
        super().__init__()
        self.tag, self.count = tag, int(count)

    def load(self):
        return {"out": [{"tag": self.tag, "i": i} for i in range(self.count)]}


class Barrier(Step):
    """Waits until ``parties`` runs reached it (files in ``folder``), so both sources are stored."""

    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "folder": {"type": "string", "default": ""},
        "parties": {"type": "number", "default": 1},
        "tag": {"type": "string", "default": "a"},
    }

    def __init__(self, folder="", parties=1, tag="a"):
        super().__init__()
        self.folder, self.parties, self.tag = folder, int(parties), tag

    def on_start(self):
        if not self.folder:
            return
        os.makedirs(self.folder, exist_ok=True)
        open(os.path.join(self.folder, self.tag), "w").close()
        deadline = time.time() + 60
        while len(os.listdir(self.folder)) < self.parties and time.time() < deadline:
            time.sleep(0.05)


class Join(Step):
    """One note per input note (the tags it saw), from both of its inputs."""

    RequiresInput = True
    Outputs = ["out"]

    def on_data(self, data):
        data["joined"] = True
