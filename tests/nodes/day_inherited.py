"""Nodes of tests/defs/test_schedules.py (INHERITED_DAY_NODES)."""

from pathlib import Path

from graphbook.steps import SourceStep, Step


class Src(SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{}]}


class Base(Step):
    Parameters = {"dest": {"type": "string"}}

    def __init__(self, dest="base/{partition_key}"):
        super().__init__()
        self.dest = dest

    def on_data(self, data):
        data["dest"] = self.dest


class Child(Base):  # an ordinary wrapper: its base's default is its own
    def __init__(self, **kwargs):
        super().__init__(**kwargs)


class PathDefault(Step):
    Parameters = {"out_dir": {"type": "string"}}

    def __init__(self, out_dir=Path("pd/{partition_key}")):
        super().__init__()
        self.out_dir = out_dir

    def on_data(self, data):
        data["out_dir"] = str(self.out_dir)


class ListDefault(Step):
    Parameters = {"paths": {"type": "list[string]"}}

    def __init__(self, paths=("a/{partition_key}", "b")):
        super().__init__()
        self.paths = paths

    def on_data(self, data):
        data["paths"] = list(self.paths)
