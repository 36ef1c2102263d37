"""The Filter guide's code blocks (docs/packages/core/guides/filter.rst) and the Outputs block of
the core page, on numbers. Names get a suffix where the guide reuses one name for variants.
The guide imports ``graphbook.steps``/``graphbook.utils``, which 0.13.3 lacks (conformance case
``docs_imports``); here their ``graphbook.core`` paths, so the behaviour is compared."""

import copy

from graphbook import output, param, source, step
from graphbook.core.steps import Step
from graphbook.core.utils import transform_function_string

VALUES = [0.1, 0.5, 0.7, 0.9]
PREDICTIONS = [["dog", "cat"], ["cat"], ["dog", "dog"], ["cat", "dog", "cat"]]


@step("Docs/Values")
@source()
def values(ctx):
    for i, (v, preds) in enumerate(zip(VALUES, PREDICTIONS)):
        images = [{"id": f"{i}.{k}", "prediction": p} for k, p in enumerate(preds)]
        yield {"out": {"value": v, "images": images}}


@step("Filter", event="route")
@param("threshold", type="number", default=0.5)
@output("good", "junk")
def filter(ctx, data: dict):
    if data["value"] > ctx.threshold:
        return {"good": [data]}
    return {"junk": [data]}


@step("FilterDelete", event="route")
@param("threshold", type="number", default=0.5)
@output("good", "junk")
def filter_delete(ctx, data: dict):
    if data["value"] > ctx.threshold:
        return "good"
    return {}  # Frees it from memory


@step("Duplicate", event="route")
def duplicate(ctx, data: dict):
    data_v1 = copy.deepcopy(data)
    data_v1["version"] = 1
    data_v2 = copy.deepcopy(data)
    data_v2["version"] = 2
    return {"out": [data_v1, data_v2]}


@step("FixImages", event="route")
@output("dog", "cat")
def fix_images(ctx, data: dict):
    dog_images = []
    cat_images = []
    for image in data["images"]:
        if image["prediction"] == "dog":
            dog_images.append(image)
        else:
            cat_images.append(image)
    outputs = {}
    if len(dog_images) > 0:
        dog = copy.deepcopy(data)
        dog["images"] = dog_images
        outputs["dog"] = [dog]
    if len(cat_images) > 0:
        cat = copy.deepcopy(data)
        cat["images"] = cat_images
        outputs["cat"] = [cat]
    return outputs


class FilterShort(Step):
    """The guide's class form returning just the slot name."""

    RequiresInput = True
    Parameters = {"threshold": {"type": "number", "default": 0.5}}
    Outputs = ["good", "junk"]
    Category = ""

    def __init__(self, threshold):
        super().__init__()
        self.threshold = threshold

    def route(self, data: dict) -> str:
        if data["value"] > self.threshold:
            return "good"
        return "junk"


class FilterByFn(Step):
    """Filter based on a given function (a Function resource's code)."""

    RequiresInput = True
    Parameters = {"fn": {"type": "resource"}}
    Outputs = ["TRUE", "FALSE"]
    Category = ""

    def __init__(self, fn):
        super().__init__()
        self.fn = transform_function_string(fn)

    def route(self, data: dict) -> str:
        split_result = self.fn(data)
        if split_result:
            return "TRUE"
        return "FALSE"


@step("OutputsDoc")
@output("good", "junk")
@param("threshold", type="number", default=0.5)
def outputs_doc(ctx, data: dict):
    """The core page's Outputs block: on_data returns a slot name, which Graphbook ignores (the
    notes go to the default 'out', which the step does not declare)."""
    if data["value"] > ctx.threshold:
        return "good"
    return "junk"
