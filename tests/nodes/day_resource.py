"""Nodes of tests/defs/test_schedules.py (DAY_RESOURCE_NODES)."""

from graphbook.resources import Resource
from graphbook.steps import SourceStep


class DayModel(Resource):
    Parameters = {"checkpoint": {"type": "string"}}

    def __init__(self, checkpoint="models/{partition_key}.pt"):
        super().__init__(checkpoint)
        self.checkpoint = checkpoint

    def value(self):
        return self.checkpoint


class UsesModel(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"model": {"type": "resource"}}

    def __init__(self, model=None):
        super().__init__()
        self.model = model

    def load(self):
        return {"out": [{"model": self.model}]}
