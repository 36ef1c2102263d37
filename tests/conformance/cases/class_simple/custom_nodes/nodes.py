from graphbook.core.steps import SourceStep, Step


class MyFirstSource(SourceStep):
    RequiresInput = False
    Parameters = {"message": {"type": "string", "default": "Hello, World!"}}
    Outputs = ["message"]
    Category = "Custom"

    def __init__(self, message):
        super().__init__()
        self.message = message

    def load(self):
        return {"message": [{"message": self.message, "i": i} for i in range(10)]}


class MyFirstStep(Step):
    RequiresInput = True
    Parameters = {"prob": {"type": "resource"}}
    Outputs = ["A", "B"]
    Category = "Custom"

    def __init__(self, prob):
        super().__init__()
        self.prob = prob

    def on_data(self, data):
        data["seen_by"] = self.id

    def route(self, data):
        return "A" if (data["i"] * 37 % 10) / 10 < self.prob else "B"
