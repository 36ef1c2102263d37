"""Nodes of tests/model/test_workflow.py (EXTRA_NODES)."""

from graphbook import param, source, step


@step("Test/Needs")
@param("must", "string", required=True)
def needs(ctx, data):
    pass


@step("Test/Options")
@param("opts", "dict")
@param("tags", "list[string]")
def options(ctx, data):
    pass


@step("Test/Ask")
@source()
def ask(ctx):
    yield {"out": {}}
