"""Nodes of tests/e2e/test_sharding.py (NODES)."""

import os
import uuid

from graphbook.steps import BatchStep, SourceStep, Step


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {
        "n": {"type": "number", "default": 30},
        "base": {"type": "number", "default": 0},
    }

    def __init__(self, n=30, base=0):
        super().__init__()
        self.n, self.base = int(n), int(base)

    def load(self):
        return {
            "out": [
                {"i": self.base + i, "items": [self.base + i, self.base + i + 100]}
                for i in range(self.n)
            ]
        }


class Parity(BatchStep):
    """Even notes to ``even``, odd ones to ``odd``; ``bad``: an item value whose load
    fails; ``fail_at``: the note whose batch fails its first ``fail_times`` attempts (marker
    files ``marks``/failed_once<k>); ``interrupt`` 2: kills its own process instead;
    ``tag``: a string parameter (partition key placeholder); ``interrupt``: fail_at
    raises KeyboardInterrupt instead; ``lock_at``: that note gets an unpicklable value;
    ``ratio``: a float figure."""

    RequiresInput = True
    Outputs = ["even", "odd"]
    Parameters = {
        "marks": {"type": "string", "default": ""},
        "fail_at": {"type": "number", "default": -1},
        "bad": {"type": "number", "default": -1},
        "tag": {"type": "string", "default": ""},
        "interrupt": {"type": "number", "default": 0},
        "lock_at": {"type": "number", "default": -1},
        "fail_times": {"type": "number", "default": 1},
        "ratio": {"type": "number", "default": -1},
    }

    def __init__(
        self,
        marks="",
        fail_at=-1,
        bad=-1,
        tag="",
        interrupt=0,
        lock_at=-1,
        fail_times=1,
        ratio=-1,
    ):
        super().__init__(batch_size=4, item_key="items")
        self.marks, self.fail_at, self.bad, self.tag = marks, int(fail_at), int(bad), tag
        self.interrupt, self.lock_at = int(interrupt), int(lock_at)
        self.fail_times = int(fail_times)
        self.ratio = float(ratio)
        self.correct = 0
        self.total = 0

    def _mark(self, name):
        if self.marks:
            open(os.path.join(self.marks, f"{name}-{uuid.uuid4().hex}"), "w").close()

    def on_start(self):
        self._mark("start")

    def on_end(self):
        self._mark("end")
        self.dagster_metadata = {
            "correct": self.correct,
            "items_seen": self.total,
            "num_classes": 2,  # a constant of the step, the same in every shard
        }
        if self.ratio >= 0:  # a float figure (such as accuracy); Parity has no on_commit
            self.dagster_metadata["ratio"] = self.ratio

    def load_fn(self, item):
        if item == self.bad:
            raise ValueError(f"item {item} cannot be loaded")
        return item

    def on_item_batch(self, outputs, items, notes):
        failed = [f for f in os.listdir(self.marks or ".") if f.startswith("failed_once")]
        if any(n["i"] == self.fail_at for n in notes) and len(failed) < self.fail_times:
            if self.marks:
                open(os.path.join(self.marks, f"failed_once{len(failed)}"), "w").close()
            if self.interrupt == 2:  # kill -9 of the shard's process
                import signal

                os.kill(os.getpid(), signal.SIGKILL)
            if self.interrupt:  # as a Ctrl-C or a terminated run worker
                raise KeyboardInterrupt("interrupted at fail_at")
            raise RuntimeError("the batch holding fail_at fails")
        for value, note in zip(outputs, notes):
            note.setdefault("doubled", []).append(value * 2)
            if self.tag:
                note["tag"] = self.tag
            if note["i"] == self.lock_at:
                import threading

                note["lock"] = threading.Lock()  # cannot be pickled
            self.total += 1
            self.correct += int(value % 3 == 0)
        return None

    def route(self, note):
        return {"even" if note["i"] % 2 == 0 else "odd": note}


class Boom(Parity):
    """Parity whose commit hook raises."""

    def on_commit(self, shard_figures):
        raise RuntimeError("on_commit cannot merge these figures")


class Keeps(Parity):
    """Parity whose commit hook returns its constant once."""

    def on_commit(self, shard_figures):
        return {"num_classes": shard_figures[0]["num_classes"]}


class Logs(Parity):
    """Parity whose commit hook logs as the step (an instance: the step is built)."""

    def on_commit(self, shard_figures):
        self.log(f"committing {len(shard_figures)} shards")
        return {}


class Dumping(Parity):
    """Parity that writes one file per item through dump_fn into ``marks``."""

    @staticmethod
    def dump_fn(path, text):
        with open(path, "w") as f:
            f.write(text)
        return path

    def on_item_batch(self, outputs, items, notes):
        super().on_item_batch(outputs, items, notes)
        return [(os.path.join(self.marks, f"item-{item}.txt"), str(item * 2)) for item in items]


class Collect(Step):
    """Passes notes on; the order it saw them in is its output."""

    RequiresInput = True
    Outputs = ["out"]

    def on_data(self, data):
        data["seen_by_collect"] = True
