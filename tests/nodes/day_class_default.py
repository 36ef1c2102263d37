"""Nodes of tests/defs/test_schedules.py (DEFAULT_DAY_NODES)."""

from graphbook.steps import SourceStep, Step


class DaySource(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"path": {"type": "string", "default": "in/{partition_key}/x"}}

    def __init__(self, path="in/{partition_key}/x"):
        super().__init__()
        self.path = path

    def load(self):
        return {"out": [{"path": self.path}]}


class DayWriter(Step):
    Parameters = {"out_dir": {"type": "string"}}  # no declared default: the __init__'s

    def __init__(self, out_dir="out/{partition_key}"):
        super().__init__()
        self.out_dir = out_dir

    def on_data(self, data):
        data["out_dir"] = self.out_dir
