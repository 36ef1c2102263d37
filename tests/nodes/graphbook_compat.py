"""Written the way Graphbook's docs write nodes (several of these imports fail on 0.13.3)."""

import graphbook
from graphbook import output, param, source, step, utils  # noqa: F401 (imports Graphbook's docs use)
from graphbook.core import steps as core_steps
from graphbook.core.resources import NumberResource
from graphbook.resources import Resource
from graphbook.steps import BatchStep, SourceStep, Step  # noqa: F401 (imports Graphbook's docs use)
from graphbook.utils import image, transform_function_string


class Prefix(Resource):
    """A resource subclass: its value is its val with a prefix."""

    Parameters = {"val": {"type": "string", "default": "p"}}

    def value(self):
        return "pre-" + self.val


class Tagger(Step):
    """Tags each note with the prefix resource and routes on a function string."""

    RequiresInput = True
    Parameters = {
        "prefix": {"type": "resource"},
        "rule": {"type": "function", "default": "def rule(d):\n    return d['i'] % 2 == 0\n"},
    }
    Outputs = ["even", "odd"]
    Category = "Compat"

    def __init__(self, prefix, rule):
        super().__init__()
        self.prefix = prefix
        self.rule = transform_function_string(rule)

    def on_data(self, data):
        data["tag"] = f"{self.prefix}{data['i']}"
        data["img"] = image(f"/tmp/{data['i']}.png")
        data["batchable"] = utils.is_batchable([1])

    def route(self, data):
        return "even" if self.rule(data) else "odd"


@step("Compat/Numbers")
@source()
@param("count", "number", default=3)
def numbers(ctx):
    for i in range(int(ctx.count)):
        yield {"out": {"i": i, "is_graphbook_step": isinstance(ctx, graphbook.steps.Step)}}


assert core_steps.Step is Step
assert NumberResource.__name__ == "NumberResource"
