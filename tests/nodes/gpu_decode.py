"""Nodes of tests/execution/test_gpu_decode.py (NODES)."""

import torch

from dagster_graphbook import encoded_image
from graphbook.steps import BatchStep, SourceStep


class Images(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"files": {"type": "string", "default": ""}}

    def __init__(self, files=""):
        super().__init__()
        self.files = files.split(",")

    def load(self):
        return {"out": [{"image": f, "name": f.rsplit("/", 1)[-1]} for f in self.files]}


def colour(x):
    """The 'model': the dominant channel and the mean colour of each image."""
    means = x.mean(dim=(2, 3))
    return ["rgb"[i] for i in means.argmax(dim=1).tolist()], means.cpu().tolist()


class ClassifyPil(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"batch_size": {"type": "number", "default": 4}}

    def __init__(self, batch_size=4):
        super().__init__(batch_size, "image")

    @staticmethod
    def load_fn(item):
        from custom_nodes.nightly.nightly_nodes import ClassifyShapes

        return ClassifyShapes.load_fn(item, 32)

    def on_item_batch(self, outputs, items, notes):
        labels, means = colour(torch.stack(list(outputs)).to(self.device))
        for note, label, mean in zip(notes, labels, means):
            note["label"], note["mean"] = label, mean


class ClassifyEncoded(ClassifyPil):
    @staticmethod
    def load_fn(item):
        return encoded_image(item, 32)
