"""Nodes of tests/e2e/test_previews.py (HOSTILE_NODES)."""

from graphbook.steps import SourceStep


class Paths(SourceStep):
    """Passes paths along, as the demo's IncomingImages does: one note per ``paths`` entry."""

    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"paths": {"type": "string", "default": ""}}

    def __init__(self, paths=""):
        super().__init__()
        self.paths = paths

    def load(self):
        return {"out": [{"image": p, "n": i} for i, p in enumerate(self.paths.split("|"))]}
