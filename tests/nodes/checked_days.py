"""Nodes of tests/defs/test_checks.py (DAY_NODES)."""

import os

from graphbook.steps import SourceStep, Step


class DayFiles(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"folder": {"type": "string", "default": "incoming/{partition_key}"}}

    def __init__(self, folder="incoming/{partition_key}"):
        super().__init__()
        self.folder = folder

    def load(self):  # a missing folder lists nothing, as a glob over it would
        names = sorted(os.listdir(self.folder)) if os.path.isdir(self.folder) else []
        return {"out": [{"file": name} for name in names]}


class Sizes(Step):
    Parameters = {}

    def on_data(self, data):
        data["size"] = len(data["file"])
