"""Nodes of tests/model/test_registry.py (SCALED_NODES)."""

import scaling_helpers

from graphbook.steps import SourceStep, Step


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{"x": x} for x in (1, 2)]}


class Scale(Step):
    RequiresInput = True
    Outputs = ["out"]

    def on_data(self, data):
        data["y"] = scaling_helpers.scale(data["x"])
