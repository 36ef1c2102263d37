"""Nodes of tests/e2e/test_integrity_exits.py (NODES)."""

import threading

from graphbook.steps import SourceStep


class Locky(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"id": 0}, {"id": 1, "lock": threading.Lock()}]}
