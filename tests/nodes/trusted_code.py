"""Nodes of tests/plan/test_trust.py (NODES)."""

from graphbook import param, source, step


@step("Trust/Count")
@source()
def count(ctx):
    for i in range(3):
        yield {"out": {"i": i}}


@step("Trust/Apply")
@param("fn", "function")
@param("label", "string", default="plain")
def apply(ctx, data):
    data["y"] = ctx.fn(data["i"])
    data["label"] = ctx.label
