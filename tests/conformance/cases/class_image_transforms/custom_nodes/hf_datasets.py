"""Offline stand-in for graphbook_huggingface's HuggingfaceDataset (same class, parameters, pin).

The plugin streams a Huggingface dataset; here three tiny "images" (a path and a 2x3 grid of
pixel values) stand in for kmeng/daisy-dog, so the run needs no network.
"""

from graphbook.core.steps import GeneratorSourceStep

ROWS = [
    {"image": "daisy0.png", "pixels": [[0, 64, 128], [255, 32, 16]], "label": 0},
    {"image": "daisy1.png", "pixels": [[10, 20, 30], [40, 50, 60]], "label": 1},
    {"image": "dog0.png", "pixels": [[200, 100, 0], [1, 2, 3]], "label": 1},
]


class HuggingfaceDataset(GeneratorSourceStep):
    """Yields the rows of a dataset split, one note each."""

    RequiresInput = False
    Parameters = {
        "dataset_id": {"type": "string", "description": "The dataset ID from Huggingface"},
        "split": {"type": "string", "default": "train"},
        "shuffle": {"type": "boolean", "default": False},
        "log_data": {"type": "boolean", "default": True},
        "image_columns": {"type": "list[string]", "required": False},
        "kwargs": {"type": "dict", "required": False},
    }
    Outputs = ["out"]
    Category = "Huggingface"

    def __init__(
        self,
        dataset_id,
        split="train",
        shuffle=False,
        log_data=True,
        image_columns=None,
        kwargs=None,
    ):
        super().__init__()
        self.dataset_id = dataset_id
        self.split = split
        self.shuffle = shuffle
        self.log_data = log_data
        self.image_columns = image_columns
        self.kwargs = kwargs

    def load(self):
        rows = list(reversed(ROWS)) if self.shuffle else ROWS
        for row in rows:
            note = dict(row, pixels=[list(r) for r in row["pixels"]])
            note["source"] = {
                "dataset_id": self.dataset_id,
                "split": self.split,
                "shuffle": self.shuffle,
                "log_data": self.log_data,
                "image_columns": self.image_columns,
                "kwargs": self.kwargs,
            }
            if self.log_data:
                self.log(note, "json")
            yield {"out": note}
