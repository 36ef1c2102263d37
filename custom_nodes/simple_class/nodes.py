"""Graphbook's class-based "simple_workflow": the same graph as simple_functional,
written by subclassing SourceStep/Step instead of using decorators.

MyFirstSource is a non-generator SourceStep: ``load()`` returns all 10 notes at once
on its custom pin "message".
"""

import random

from graphbook.steps import SourceStep, Step


class MyFirstStep(Step):
    """
    This is a custom step that randomly forwards the input to either A or B given the probability
    `prob`.

    Args:
        prob (float): The probability of forwarding the input to A.
        seed (int): Optional random seed, for reproducible routing (0 is a valid seed).
    """

    RequiresInput = True
    Parameters = {
        "prob": {"type": "resource"},
        "seed": {"type": "number", "default": None},
    }
    Outputs = ["A", "B"]
    Category = "Custom"

    def __init__(self, prob, seed=None):
        super().__init__()
        self.prob = prob
        self.rng = random.Random() if seed is None else random.Random(int(seed))

    def on_data(self, data: dict):
        self.log(data["message"])

    def route(self, data: dict) -> str:
        if self.rng.random() < self.prob:
            return "A"
        return "B"


class MyFirstSource(SourceStep):
    """
    This is a custom source step that creates 10 notes with the same message.

    Args:
        message (str): The message to be used in the notes
    """

    RequiresInput = False
    Parameters = {"message": {"type": "string", "default": "Hello, World!"}}
    Outputs = ["message"]
    Category = "Custom"

    def __init__(self, message="Hello, World!"):
        super().__init__()
        self.message = message

    def load(self):
        return {"message": [{"message": self.message, "i": i} for i in range(10)]}
