"""Graphbook 0.13.3's built-in filters in use: the issue's import line (every name of
``graphbook.core.steps.__all__`` a node file may need) and a step routing with a ``StepOutput``.
"""

from graphbook.core.steps import (  # noqa: F401 - the import line under test
    AsyncStep,
    Copy,
    DumpJSONL,
    LoadJSONL,
    PromptStep,
    Split,
    SplitByItems,
    SplitItemField,
    Step,
    StepOutput,
)


class CountBoxes(Step):
    """Counts a scene's boxes; a scene without any goes to ``empty``."""

    RequiresInput = True
    Parameters = {}
    Outputs = ["out", "empty"]
    Category = "Filtering"

    def __init__(self):
        super().__init__()

    def on_data(self, data: dict):
        data["count"] = len(data["boxes"])

    def route(self, data: dict) -> StepOutput:
        if data["count"] == 0:
            return {"empty": [data]}
        return {"out": [data]}
