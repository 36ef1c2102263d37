"""examples/workflows/python/custom_nodes/pokemon_nodes.py in shape, with no model download.

The "images" are text files holding a number; the ViT model resource is a table from that
number to a Pokemon name and the image processor resource a scale factor. The classes, their
parameters, ``load_fn`` as a static method run by Graphbook's workers and ``on_item_batch``
writing ``prediction`` into each item are the example's. ``os.listdir`` is sorted so the run is
reproducible.
"""

import os
import os.path as osp
from typing import List

from graphbook.core.resources import Resource
from graphbook.core.steps import BatchStep, SourceStep

LABELS = {1: "Pikachu", 2: "Raichu", 3: "Charmander", 4: "Bulbasaur", 5: "Bulbasaur", 6: "Squirtle"}


class PokemonClassifier(BatchStep):
    """Classifies incoming images of Pokemon with the model and image processor resources."""

    RequiresInput = True
    Parameters = {
        "batch_size": {"type": "number", "default": 8},
        "item_key": {"type": "string", "default": "image"},
        "model": {"type": "resource"},
        "image_processor": {"type": "resource"},
    }
    Outputs = ["out"]
    Category = "Custom"

    def __init__(self, batch_size, item_key, model, image_processor):
        super().__init__(batch_size, item_key)
        self.model = model
        self.image_processor = image_processor
        self.tp = 0
        self.num_samples = 0

    @staticmethod
    def load_fn(item: dict) -> int:
        with open(item["value"]) as f:
            return int(f.read())

    def on_item_batch(self, tensors: List[int], items: List[dict], pokemons: List[dict]):
        extracted = [t * self.image_processor for t in tensors]
        for t, item, pokemon in zip(extracted, items, pokemons):
            item["prediction"] = self.model[t]
            self.log(f"Predicted {item['value']} as {item['prediction']}")
            if item["prediction"] == pokemon["name"]:
                self.tp += 1
            self.num_samples += 1
        if self.num_samples > 0:
            self.log(f"Accuracy: {self.tp / self.num_samples:.2f}")


class LoadImageDataset(SourceStep):
    """Loads a dataset of images from a directory, one note per subfolder (the Pokemon)."""

    RequiresInput = False
    Outputs = ["out"]
    Category = "Custom"
    Parameters = {"image_dir": {"type": "string", "default": "/data/pokemon"}}

    def __init__(self, image_dir: str):
        super().__init__()
        self.image_dir = image_dir

    def load(self):
        subdirs = sorted(os.listdir(self.image_dir))

        def create_dict(subdir):
            image_dir = osp.join(self.image_dir, subdir)
            return {
                "name": subdir,
                "image": [
                    {"value": osp.join(image_dir, img), "type": "image"}
                    for img in sorted(os.listdir(image_dir))
                ],
            }

        return {"out": [create_dict(subdir) for subdir in subdirs]}


class ViTForImageClassificationResource(Resource):
    """The classifier "model": number -> name (the example loads a ViT from the hub)."""

    Category = "Huggingface/Transformers"
    Parameters = {"model_name": {"type": "string", "description": "The name of the model."}}

    def __init__(self, model_name: str):
        self.model = dict(LABELS) if model_name == "local/pokemon_classifier" else {}
        super().__init__(self.model)


class ViTImageProcessorResource(Resource):
    """The "image processor": a scale factor (the example loads a ViTImageProcessor)."""

    Category = "Huggingface/Transformers"
    Parameters = {"image_processor": {"type": "string", "description": "The processor."}}

    def __init__(self, image_processor: str):
        self.image_processor = 1 if image_processor == "local/pokemon_classifier" else 0
        super().__init__(self.image_processor)

    def value(self):
        return self.image_processor
