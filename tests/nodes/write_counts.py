"""Nodes of tests/e2e/test_integrity_writes.py (COUNT_NODES)."""

from graphbook.steps import SourceStep


class Count(SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{"i": i, "text": "x" * 100} for i in range(2000)]}
