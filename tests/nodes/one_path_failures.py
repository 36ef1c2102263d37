"""Nodes of tests/e2e/test_one_path_failures.py (NODES)."""

from graphbook.steps import SourceStep, Step


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"n": {"type": "number", "default": 4}}

    def __init__(self, n=4):
        super().__init__()
        self.n = int(n)

    def load(self):
        return {"out": [{"i": i} for i in range(self.n)]}


class Pass(Step):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {}
