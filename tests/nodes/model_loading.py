"""Nodes of tests/defs/test_definitions.py (MODEL_NODES)."""

from graphbook.resources import Resource
from graphbook.steps import SourceStep, Step


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"x": i} for i in range(3)]}


class Scale(Step):
    Parameters = {
        "model": {"type": "resource", "description": "a Doubler"},
        "factor": {"type": "resource", "default": 2},
        "offset": {"type": "resource"},
    }

    def __init__(self, model=None, factor=2, offset=0):
        super().__init__()
        self.model, self.factor, self.offset = model, factor, offset

    def on_data(self, data):
        data["y"] = self.model(data["x"]) * self.factor + self.offset


class Doubler(Resource):
    Parameters = {}

    def value(self):
        return lambda x: 2 * x
