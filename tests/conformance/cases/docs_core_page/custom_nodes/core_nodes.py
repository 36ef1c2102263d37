"""The code blocks of the docs' core page (docs/packages/core/index.rst) and the Parameters
reference (reference/params.rst), on numbers: parameters of each type, ``cast_as``, a function
parameter, ``@event("route", ...)``, resources with parameters, class and function forms.

Names get a suffix where the docs reuse ``MyStep``/``MyModel`` for each block; torch models are
replaced by small values; the docs' ``graphbook.steps``/``graphbook.resources`` imports (absent
from 0.13.3, case ``docs_imports``) use their ``graphbook.core`` paths.
"""

from graphbook import event, output, param, resource, source, step
from graphbook.core.resources import Resource
from graphbook.core.steps import Step


@step("Docs/Numbers")
@source()
def numbers(ctx):
    for v in (0.25, 0.75):
        yield {"out": {"value": v, "tensor": [v, 2 * v, 3 * v]}}


@step("MyStepParams")
@param("message", type="string", default="Hello, World!")
@param("offset", type="number", default=0)
def my_step_params(ctx, data: dict):
    data["message"] = ctx.message
    data["offset"] = ctx.offset


class MyStepParamsClass(Step):
    RequiresInput = True
    Parameters = {
        "message": {"type": "string", "default": "Hello, World!"},
        "offset": {"type": "number", "default": 0},
    }
    Outputs = ["out"]
    Category = ""

    def __init__(self, message, offset):
        super().__init__()
        self.message = message
        self.offset = offset

    def on_data(self, data: dict) -> str:
        data["class_message"] = self.message
        data["class_offset"] = self.offset


@step("MyStepCast")
@param("dimension", type="number", default=0, cast_as=int)
@param("custom_fn", type="function")
def my_step_cast(ctx, data: dict):
    data["mean"] = sum(data["tensor"][ctx.dimension :]) / len(data["tensor"][ctx.dimension :])
    data["custom"] = ctx.custom_fn(data["value"])
    data["dimension"] = ctx.dimension


@step("MyStepLists")
@param("cars", type="list[string]", default=["car", "truck"])
@param(
    "car",
    type="dict",
    default={"make": "Toyota", "model": "Camry", "price": 25000, "in_stock": True},
)
def my_step_lists(ctx, data: dict):
    data["cars"] = ctx.cars
    data["car"] = ctx.car


def route(ctx, data: dict) -> str:
    if data["value"] > 0.5:
        return "good"
    return "junk"


@step("MyStepEvents")
@output("good", "junk")
@event("route", route)
def my_step_events(ctx, data: dict):  # on_data
    ctx.log(data)


class MyStepEventsClass(Step):
    RequiresInput = True
    Parameters = {}
    Outputs = ["good", "junk"]
    Category = ""

    def __init__(self):
        super().__init__()

    def on_data(self, data: dict):
        self.log(data)

    def route(self, data: dict) -> str:
        if data["value"] > 0.5:
            return "good"
        return "junk"


@resource("MyModel")
@param("model_id", type="string", default="model_1")
def my_first_resource(ctx):
    return {"model_id": ctx.model_id, "weights": [1, 2, 3]}


class MyModelClass(Resource):
    Category = ""
    Parameters = {"model_id": {"type": "string", "default": "model_1"}}

    def __init__(self, model_id):
        super().__init__()
        self.model = {"model_id": model_id, "weights": [3, 2, 1]}

    def value(self):
        return self.model


@step("Custom/MyStepModel")
@param("model", type="resource")
def my_step_model(ctx, data: dict):
    model = ctx.model
    data["prediction"] = sum(w * t for w, t in zip(model["weights"], data["tensor"]))
    data["model_id"] = model["model_id"]


class MyStepModelClass(Step):
    RequiresInput = True
    Parameters = {"model": {"type": "resource"}}
    Outputs = ["out"]
    Category = "Custom/Producer"

    def __init__(self, model):
        super().__init__()
        self.model = model

    def on_data(self, data: dict) -> str:
        data["class_prediction"] = sum(w * t for w, t in zip(self.model["weights"], data["tensor"]))
