"""Nodes of tests/execution/test_step_metadata.py (NODES)."""

from graphbook.steps import BatchStep, SourceStep, Step


class Numbers(SourceStep):
    """Yields ``n`` notes ``{"i": i, "items": [i]}``."""

    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"n": {"type": "number", "default": 7}}

    def __init__(self, n=7):
        super().__init__()
        self.n = int(n)

    def load(self):
        return {"out": [{"i": i, "items": [i]} for i in range(self.n)]}


class Scale(BatchStep):
    """Multiplies each item by ten in :meth:`load_fn` (a :class:`~graphbook.steps.BatchStep`)."""

    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 3},
        "item_key": {"type": "string", "default": "items"},
    }

    def __init__(self, batch_size=3, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        return item * 10

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note["scaled"] = int(out)
        return None


class Parity(Step):
    """Sends each note to a pin by the parity of ``i`` (see :class:`Numbers`).

    Outputs:
        even: notes whose ``i`` is even
        odd: notes whose ``i`` is
            odd
    """

    RequiresInput = True
    Outputs = ["even", "odd", "other"]
    Parameters = {}

    def route(self, note):
        return "even" if note["i"] % 2 == 0 else "odd"
