"""Nodes of tests/e2e/test_integrity_hangs.py (STUCK_NODES)."""

import time

from graphbook.steps import SourceStep, Step


class Count(SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{"i": i} for i in range(3)]}


class Stuck(Step):
    """Blocks on note 1 as a read from a stalled mount would (here for 4 s)."""

    RequiresInput = True
    Outputs = ["out"]

    def on_data(self, data):
        if data["i"] == 1:
            time.sleep(4)
