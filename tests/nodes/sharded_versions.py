"""Nodes of tests/e2e/test_sharding.py (VERSIONED)."""

import os
import time

from graphbook.steps import BatchStep

VERSION = "old"


class Stamp(BatchStep):
    """Stamps each note with VERSION. ``flags``: until there is a ``go`` there, a batch
    writes ``started`` there and waits for it; a ``broken`` file there fails the batch of
    note ``fail_at``; ``payload``: that many bytes more in each note."""

    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "flags": {"type": "string", "default": ""},
        "fail_at": {"type": "number", "default": -1},
        "payload": {"type": "number", "default": 0},
    }

    def __init__(self, flags="", fail_at=-1, payload=0):
        super().__init__(batch_size=4, item_key="items")
        self.flags, self.fail_at, self.payload = flags, int(fail_at), int(payload)

    def load_fn(self, item):
        return item

    def on_item_batch(self, outputs, items, notes):
        numbers = [n["i"] for n in notes]
        if not os.path.exists(os.path.join(self.flags, "go")):
            open(os.path.join(self.flags, "started"), "w").close()
            deadline = time.monotonic() + 240
            while not os.path.exists(os.path.join(self.flags, "go")):
                assert time.monotonic() < deadline, "the test never said go"
                time.sleep(0.05)
        if self.fail_at in numbers and os.path.exists(os.path.join(self.flags, "broken")):
            raise RuntimeError("the batch of fail_at fails while flags/broken exists")
        for note in notes:
            note["version"] = VERSION
            if self.payload:
                note["payload"] = os.urandom(self.payload)  # does not compress
