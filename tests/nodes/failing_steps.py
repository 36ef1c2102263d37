"""Nodes of tests/runner/test_run.py (FAILING_NODES)."""

from graphbook import event, param, source, step


@step("Fail/Numbers")
@source()
@param("n", "number", default=6)
@param("break_at", "number", default=-1)
def numbers(ctx):
    for i in range(int(ctx.n)):
        if i == ctx.break_at:
            raise RuntimeError("source ran dry")
        yield {"out": {"i": i}}


def mark_end(ctx):
    with open(ctx.marker, "a") as f:
        f.write("end\n")


@step("Fail/Boom")
@event("on_end", mark_end)
@param("bad", "number", default=3)
@param("marker", "string", default="")
def boom(ctx, data):
    if data["i"] == ctx.bad:
        raise ValueError(f"cannot handle {data['i']}")
    data["ok"] = True
