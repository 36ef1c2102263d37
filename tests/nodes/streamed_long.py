"""Nodes of tests/execution/test_stream.py (LONG_NODES)."""

import gc
import tracemalloc

from graphbook.steps import BatchStep, GeneratorSourceStep, Step


class Endless(GeneratorSourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"n": {"type": "number", "default": 10}}

    def __init__(self, n=10):
        super().__init__()
        self.n = int(n)

    def load(self):
        for i in range(self.n):
            yield {"out": {"i": i, "items": [i], "payload": bytes(1000)}}


class Double(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 16},
        "item_key": {"type": "string", "default": "items"},
    }

    def __init__(self, batch_size=16, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        return 2 * item

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note["doubled"] = out


class DropPayload(Step):
    RequiresInput = True
    Outputs = []  # a sink that stores nothing: each note is done with here
    Parameters = {
        "marks": {"type": "string", "default": ""},
        "report": {"type": "string", "default": ""},
    }

    def __init__(self, marks="", report=""):
        super().__init__()
        self.marks = {int(m) for m in str(marks).split(",") if m}
        self.report = report

    def on_data(self, note):
        note.pop("payload")
        if note["i"] == 0:
            tracemalloc.start()
        if note["i"] in self.marks:
            gc.collect()
            with open(self.report, "a") as f:  # bytes traced since the first note
                f.write(f"{note['i']} {tracemalloc.get_traced_memory()[0]}\n")
