"""Nodes of tests/defs/component/test_translation.py (TEXT_NODES)."""

from graphbook import param, source, step


@step("Text/Text")
@source()
@param("text", "string", default="")
def text(ctx):
    yield {"out": {"text": ctx.text}}
