"""The shapes of Graphbook's docs code blocks (they import graphbook.steps, absent from 0.13.3)."""

from graphbook import utils
from graphbook.steps import SourceStep, Step


class DocSource(SourceStep):
    RequiresInput = False
    Parameters = {}
    Outputs = ["out"]
    Category = "Docs"

    def load(self):
        return {"out": [{"value": v} for v in (1, 2)]}


class DocStep(Step):
    RequiresInput = True
    Parameters = {}
    Outputs = ["out"]
    Category = "Docs"

    def on_data(self, data):
        data["image"] = utils.image("x.png")
