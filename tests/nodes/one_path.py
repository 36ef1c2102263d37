"""Nodes of tests/e2e/test_one_path.py (NODES)."""

import time

from graphbook.steps import BatchStep, SourceStep, Step


class Numbers(SourceStep):
    """``n`` one-item notes; ``pause`` seconds inside the generator before note 2."""

    RequiresInput = False
    Outputs = ["out"]
    Parameters = {
        "n": {"type": "number", "default": 69},
        "pause": {"type": "number", "default": 0.0},
    }

    def __init__(self, n=69, pause=0.0):
        super().__init__()
        self.n, self.pause = int(n), float(pause)

    def load(self):
        notes = []
        for i in range(self.n):
            if i == 2 and self.pause:
                time.sleep(self.pause)
            notes.append({"i": i, "items": [f"item-{i}"]})
        return {"out": notes}


class Check(BatchStep):
    """``load_fn`` fails for the items whose number is in ``bad``."""

    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"bad": {"type": "string", "default": "68"}}

    def __init__(self, bad="68"):
        super().__init__(batch_size=4, item_key="items")
        self.bad = bad

    @staticmethod
    def load_fn(item):
        return item

    def on_item_batch(self, outputs, items, notes):
        for value in outputs:
            if value.split("-")[1] in self.bad.split(","):
                raise ValueError(f"bad item {value}")
        return None


class Nap(Step):
    """Sleeps ``seconds`` on note 1, as a read from a stalled mount would."""

    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"seconds": {"type": "number", "default": 0.0}}

    def __init__(self, seconds=0.0):
        super().__init__()
        self.seconds = float(seconds)

    def on_data(self, data):
        if data["i"] == 1:
            time.sleep(self.seconds)
