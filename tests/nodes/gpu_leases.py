"""Nodes of tests/execution/ownership/test_leases.py (NODES)."""

import os
import time

from graphbook.resources import Resource
from graphbook.steps import BatchStep, SourceStep


class WhereBuilt(Resource):
    """What CUDA_VISIBLE_DEVICES was when the resource was built (a model loaded onto
    the GPU there would have started CUDA on those GPUs)."""

    Parameters = {}

    def __init__(self):
        super().__init__(os.environ.get("CUDA_VISIBLE_DEVICES"))


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        return {"out": [{"i": i, "items": [i]} for i in range(12)]}


class WhereAmI(BatchStep):
    """Records its process and CUDA_VISIBLE_DEVICES in each note. on_start waits (60 s at
    most: a loaded machine starts step processes slowly) until both shards started: both
    hold their leases at once."""

    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "marks": {"type": "string", "default": ""},
        "built": {"type": "resource"},
    }

    def __init__(self, marks="", built=None):
        super().__init__(batch_size=4, item_key="items")
        self.marks = marks
        self.built = built

    def on_start(self):
        open(os.path.join(self.marks, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(self.marks)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)

    @staticmethod
    def load_fn(item):
        return item

    def on_item_batch(self, outputs, items, notes):
        for note in notes:
            note.update(pid=os.getpid(), visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
            note["built"] = self.built
            note["device"] = str(self.device)
