"""Nodes of tests/conformance/test_fidelity.py (UNSUPPORTED_NODES)."""

from graphbook import prompt, step
from graphbook.core.steps import AsyncStep, PromptStep, SourceStep
from graphbook.prompts import bool_prompt


class Numbers(SourceStep):
    def load(self):
        return {"out": [{"i": 0}, {"i": 1}]}


class Ask(PromptStep):
    def __init__(self):
        super().__init__()

    def on_prompt_response(self, data, response):
        data["ok"] = response


class Queued(AsyncStep):
    def __init__(self):
        super().__init__()


@step("Review")
@prompt(lambda ctx, data: bool_prompt(data))
def review(ctx, data, response):
    data["ok"] = response
