"""Nodes of tests/e2e/ui_cases.py (EDIT_NODES)."""

from graphbook import param, step


@step("UI/Tally")
@param("scale", "number", default=1)
def tally(ctx, data):
    data["tally"] = data["i"] * ctx.scale
