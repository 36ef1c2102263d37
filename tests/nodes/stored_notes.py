"""Nodes of tests/store/test_io_manager.py (NODES)."""

from graphbook import source, step


@step("Io/Emit")
@source()
def emit(ctx):
    for i in range(3):
        yield {"out": {"i": i}}


@step("Io/Double")
def double(ctx, data):
    data["twice"] = 2 * data["i"]
