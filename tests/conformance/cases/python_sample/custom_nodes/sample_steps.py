"""Class-based steps as in examples/workflows/python/SampleWorkflow.py (deterministic numbers)."""

from graphbook.core.resources import Resource
from graphbook.core.steps import GeneratorSourceStep, Step


class GenerateNumbers(GeneratorSourceStep):
    RequiresInput = False
    Parameters = {"amount": {"type": "number", "default": 1000}}
    Outputs = ["out"]
    Category = ""

    def __init__(self, amount):
        super().__init__()
        self.amount = amount

    def load(self):
        for i in range(self.amount):
            yield {
                "out": {
                    "numbers": [(i * 5 + k) % 9 for k in range(4)],
                    "amount_type": type(self.amount).__name__,
                }
            }


class Transform(Step):
    RequiresInput = True
    Parameters = {
        "scale": {"type": "number", "default": 1},
        "shift": {"type": "number", "default": 0},
    }
    Outputs = ["out"]
    Category = ""

    def __init__(self, scale, shift):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def on_data(self, data):
        data["numbers"] = [n * self.scale + self.shift for n in data["numbers"]]


class CalcMean(Step):
    RequiresInput = True
    Parameters = {}
    Outputs = ["out"]
    Category = ""

    def on_data(self, data):
        data["mean"] = sum(data["numbers"]) / len(data["numbers"])


class Threshold(Resource):
    Parameters = {"val": {"type": "number"}}
    Category = ""

    def __init__(self, val):
        super().__init__(val)

    def value(self):
        return self.val


class SplitMean(Step):
    RequiresInput = True
    Parameters = {"threshold": {"type": "resource"}}
    Outputs = ["high", "low"]
    Category = ""

    def __init__(self, threshold):
        super().__init__()
        self.threshold = threshold

    def route(self, data):
        return "high" if data["mean"] > self.threshold else "low"
