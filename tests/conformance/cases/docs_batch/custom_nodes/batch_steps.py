"""The class forms of the docs' Batch Data and Dump Data guides (guides/batch.rst, dump.rst):
BatchStep classes whose load_fn, dump_fn and on_item_batch are static methods, run by
Graphbook's worker pool. "Images" are text files holding a number; the dump guide's block
(which uses undefined ``images`` and ``items['value']``) zips the loaded values with the items.
The functional @batch forms cannot run on 0.13.3 (conformance case ``batch_decorator``).
"""

from typing import List

from graphbook import source, step
from graphbook.core.steps import BatchStep


@step("Docs/ImagePaths")
@source()
def image_paths(ctx):
    for names in (["1", "2", "3"], ["4"], ["5"]):
        yield {
            "out": {"image_paths": [{"value": f"images/{n}.txt"} for n in names], "tensor": None}
        }


class LoadImages(BatchStep):
    RequiresInput = True
    Parameters = {
        "batch_size": {"type": "number", "default": 8},
        "item_key": {"type": "string", "default": "image_paths"},
    }
    Outputs = ["out"]
    Category = ""

    def __init__(self, batch_size, item_key):
        super().__init__(batch_size, item_key)

    # Custom defined function that will execute in parallel
    @staticmethod
    def load_fn(item: dict) -> int:
        with open(item["value"]) as f:
            return int(f.read())

    @staticmethod
    def on_item_batch(tensors: List[int], items: List[dict], data: List[dict]):
        for tensor, d in zip(tensors, data):
            if d["tensor"] is None:
                d["tensor"] = []
            d["tensor"].append(tensor)


class DumpImages(BatchStep):
    RequiresInput = True
    Parameters = {
        "batch_size": {"type": "number", "default": 8},
        "item_key": {"type": "string", "default": "image_paths"},
    }
    Outputs = ["out"]
    Category = ""

    def __init__(self, batch_size, item_key):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item: dict) -> int:
        with open(item["value"]) as f:
            return int(f.read())

    @staticmethod
    def dump_fn(image: int, output_path: str):
        with open(output_path, "w") as f:
            f.write(f"{image * 10}\n")

    @staticmethod
    def on_item_batch(tensors: List[int], items: List[dict], data: List[dict]):
        args = []
        for image, item in zip(tensors, items):
            input_path = item["value"]
            output_path = input_path.replace(".txt", "_processed.txt")
            args.append((image, output_path))
        return args
