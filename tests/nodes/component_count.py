"""Nodes of tests/defs/component/test_component.py (COUNT_NODES)."""

from graphbook import source, step


@step("Comp/Count")
@source()
def count(ctx):
    yield {"out": {"i": 1}}
