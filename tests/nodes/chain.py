"""A chain of steps: a source and N-1 steps each reading the one before (building and depth
tests; tests/support/workflows.py's ``chain_workflow`` wires them)."""

from graphbook.steps import SourceStep, Step


class Start(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"v": 0}]}


class Inc(Step):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {}
