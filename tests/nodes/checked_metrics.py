"""Nodes of tests/defs/test_checks.py (NODES)."""

from graphbook import param, source, step


@step("Chk/Items")
@source()
@param("n", "number", default=5)
def items(ctx):
    for i in range(int(ctx.n)):
        yield {"out": {"i": i}}


@step("Chk/Score")
@param("score", "number", default=0.5)
def score(ctx, data):
    ctx.dagster_metadata = {"accuracy": ctx.score}


@step("Chk/After")
@param("marker", "string", default="")
def after(ctx, data):
    with open(ctx.marker, "a") as f:
        f.write(f"{data['i']}\n")
