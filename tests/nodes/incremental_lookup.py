"""Nodes of tests/e2e/test_incremental_faults.py (LOOKUP_NODES)."""

from lib.calc import factor

from graphbook import steps


class Numbers(steps.SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{"x": i} for i in range(3)]}


class Look(steps.Step):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"table": {"type": "string", "default": "TABLE"}}

    def __init__(self, table="TABLE"):
        super().__init__()
        with open(table) as f:
            self.word = f.read()

    def on_data(self, note):
        note["y"] = f"{self.word}{note['x'] * factor()}"
