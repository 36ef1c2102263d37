"""A day's workflow (a Graph file) whose second step fails while the file named by
``$RESUMABLE_DAYS_FAIL`` exists: a run to resume from failure."""

import os

from graphbook import Graph, param, source, step


@step("Days/Numbers")
@source()
@param("day", "string", default="{partition_key}")
@param("amount", "number", default=3)
def numbers(ctx):
    for i in range(int(ctx.amount)):
        yield {"out": {"day": ctx.day, "n": i}}


@step("Days/Square")
def square(ctx, note):
    if os.path.exists(os.environ.get("RESUMABLE_DAYS_FAIL", "")):
        raise RuntimeError("asked to fail")
    note["square"] = note["n"] ** 2


g = Graph()


@g()
def _():
    g.step(square).bind(g.step(numbers))
