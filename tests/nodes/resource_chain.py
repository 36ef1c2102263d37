"""Nodes of tests/plan/test_translator.py (RESOURCE_CHAIN_NODES)."""

from graphbook import param, resource, source, step


@resource("Chain/Scaled")
@param("base", "resource", description="bind a Number")
@param("factor", "number", default=2)
def scaled(ctx):
    """base * factor"""
    return ctx.base * ctx.factor


@step("Chain/Emit")
@source()
@param("n", "number", default=2)
def emit(ctx):
    for i in range(int(ctx.n)):
        yield {"out": {"i": i}}


@step("Chain/UseValue")
@param("value", "resource")
def use_value(ctx, data):
    data["value"] = ctx.value
