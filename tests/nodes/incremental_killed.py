"""Nodes of tests/e2e/test_incremental_faults.py (KILLED_NODES)."""

import os
import signal

from graphbook import steps


class Numbers(steps.SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"n": {"type": "number", "default": 40}}

    def __init__(self, n=40):
        super().__init__()
        self.n = int(n)

    def load(self):
        return {"out": [{"x": i} for i in range(self.n)]}


class Square(steps.BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 10},
        "item_key": {"type": "string", "default": "x"},
        "log": {"type": "string", "default": ""},
    }

    def __init__(self, batch_size=10, item_key="x", log=""):
        super().__init__(batch_size, item_key)
        self.log_path = log

    def on_item_batch(self, outputs, items, notes):
        with open(self.log_path, "a") as f:
            f.write("".join(f"{x}\n" for x in items))
        if os.environ.get("KILL_AT") and max(items) >= int(os.environ["KILL_AT"]):
            os.kill(os.getpid(), signal.SIGKILL)  # the run's process dies mid-step
        for note, x in zip(notes, items):
            note["y"] = x * x
