"""Nodes of tests/defs/test_assets.py (NODES)."""

from graphbook import param, resource, source, step


@resource("Res/Offset")
@param("offset", "number", default=1)
def offset(ctx):
    return ctx.offset


@resource("Res/Scale")
@param("factor", "number", default=2)
def scale(ctx):
    return ctx.factor


@step("Res/Emit")
@source()
def emit(ctx):
    for i in range(3):
        yield {"out": {"i": i}}


@step("Res/Use")
@param("value", "resource")
def use(ctx, data):
    data["value"] = data["i"] + ctx.value
