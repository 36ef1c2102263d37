"""Nodes of tests/e2e/test_incremental_faults.py (FANOUT_NODES)."""

from graphbook import steps


class Letters(steps.SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{"i": i} for i in range(4)]}


class Mark(steps.Step):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"key": {"type": "string", "default": "a"}}

    def __init__(self, key="a"):
        super().__init__()
        self.key = key

    def on_data(self, note):
        note[self.key] = sorted(note)  # what this step saw of the shared dict
