"""A plugin package written like graphbook-huggingface (same import lines, export() and web())."""

import graphbook.core.resources as resources
import graphbook.core.steps as steps
from graphbook.core.plugins import export, web
from graphbook.core.utils import image


class ImageTagger(steps.Step):
    RequiresInput = True
    Parameters = {"greeting": {"type": "resource"}}
    Outputs = ["out"]
    Category = "Plugin"

    def __init__(self, greeting):
        super().__init__()
        self.greeting = greeting

    def on_data(self, data):
        data["image"] = image(f"img_{data['i']}.png")
        data["greeting"] = self.greeting


class Greeting(resources.Resource):
    Parameters = {}
    Category = "Plugin"

    def __init__(self):
        super().__init__("Hello, World!")


export("ImageTagger", ImageTagger)
export("Greeting", Greeting)
web("dist/bundle.js")
