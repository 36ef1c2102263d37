"""Nodes of tests/execution/test_shards.py (NODES)."""

import os
import uuid

from graphbook.steps import BatchStep, SourceStep, Step


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"n": {"type": "number", "default": 30}}

    def __init__(self, n=30):
        super().__init__()
        self.n = int(n)

    def load(self):
        return {"out": [{"i": i, "items": [i, i + 100]} for i in range(self.n)]}


class Parity(BatchStep):
    """Doubles each item; even notes to ``even``, odd ones to ``odd``. ``marks``: a folder
    where on_start and on_data leave a file per call; ``fail_at``: the note whose batch fails
    the first time (a marker file in ``marks`` says it failed once)."""

    RequiresInput = True
    Outputs = ["even", "odd"]
    Parameters = {
        "marks": {"type": "string", "default": ""},
        "fail_at": {"type": "number", "default": -1},
    }

    def __init__(self, marks="", fail_at=-1):
        super().__init__(batch_size=4, item_key="items")
        self.marks, self.fail_at = marks, int(fail_at)
        self.correct = 0
        self.total = 0

    def _mark(self, name):
        if self.marks:
            open(os.path.join(self.marks, f"{name}-{uuid.uuid4().hex}"), "w").close()

    def on_start(self):
        self._mark("start")

    def on_data(self, data):
        self._mark(f"data-{data['i']}")

    @staticmethod
    def load_fn(item):
        return item

    def on_item_batch(self, outputs, items, notes):
        failed_once = os.path.join(self.marks, "failed_once")
        if any(n["i"] == self.fail_at for n in notes) and not os.path.exists(failed_once):
            open(failed_once, "w").close()
            raise RuntimeError("the first attempt of this shard fails")
        for value, note in zip(outputs, notes):
            note.setdefault("doubled", []).append(value * 2)
            self.total += 1
            self.correct += int(value % 3 == 0)
        return None

    def on_end(self):
        self.dagster_metadata = {
            "correct": self.correct,
            "accuracy": self.correct / max(self.total, 1),
            "items_seen": self.total,
            "ratio_without_hook": 0.5,
        }

    def on_commit(self, shard_figures):
        correct = sum(f["correct"] for f in shard_figures)
        return {"accuracy": correct / max(sum(f["items_seen"] for f in shard_figures), 1)}

    def route(self, note):
        return {"even" if note["i"] % 2 == 0 else "odd": note}


class Plain(Step):
    RequiresInput = True
    Outputs = ["out"]
