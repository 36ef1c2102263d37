"""Nodes of tests/execution/ownership/test_guard.py (PARTITION_NODES)."""

from graphbook import param, source, step


@step("Trust/Day")
@source()
@param("path", "string", default="in/{partition_key}")
@param("fn", "function", default="def fn():\n    return '{partition_key}'")
def day(ctx):
    yield {"out": {"path": ctx.path, "fn": ctx.fn()}}
