"""A Python workflow on Graphbook 0.13.3's built-in filters: LoadJSONL, a step routing with a
``StepOutput``, then SplitByItems and SplitItemField side by side, their functions given as
``param()`` source strings. The import line is the one every name of
``graphbook.core.steps.__all__`` a workflow file may need.
"""

import graphbook as gb
from graphbook.core.resources import Resource
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


g = gb.Graph()


@g()
def _():
    path = g.resource(Resource)
    path.param("val", "scenes.jsonl")
    scenes = g.step(LoadJSONL)
    scenes.param("jsonl_path", path)
    count = g.step(CountBoxes)
    count.bind(scenes, "out")

    crowded = g.step(SplitByItems)
    crowded.param("split_items_fn", "def crowded(items, data):\n    return len(items) > 2")
    crowded.param("item_key", "boxes")
    crowded.bind(count, "out")

    by_size = g.step(SplitItemField)
    by_size.param("split_fn", "def is_big(item):\n    return item >= 10")
    by_size.param("item_key", "boxes")
    by_size.param("a_key", "big")
    by_size.param("b_key", "small")
    by_size.param("should_delete_original", False)
    by_size.bind(count, "out")


if __name__ == "__main__":
    g.run()
