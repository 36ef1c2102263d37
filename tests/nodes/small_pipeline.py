"""A small pipeline for the plan compiler's tests (tests/plan/test_compiler.py): a source, a
plain step bound to a resource, a batch step, and a step whose parameter takes the name of the
run settings block (which the compiler refuses)."""

from graphbook import batch, param, resource, source, step


@resource("Small/Offset")
@param("value", "number", default=1)
def offset(ctx):
    """A number added to every note."""
    return ctx.value


@step("Small/Numbers")
@source()
@param("n", "number", default=3)
def numbers(ctx):
    """Notes 0..n-1, each with a list of items."""
    for i in range(int(ctx.n)):
        yield {"out": {"i": i, "items": [i, i + 1]}}


@step("Small/Shift")
@param("by", "resource")
@param("scale", "number", default=2)
def shift(ctx, data):
    """Scale a note's number and add the resource's offset."""
    data["i"] = data["i"] * ctx.scale + ctx.by


def load_item(ctx, item):
    return float(item)


@step("Small/Total")
@batch(2, "items", load_fn=load_item)
def total(ctx, outputs, items, notes):
    """Sum each note's items, two items a batch."""
    for out, note in zip(outputs, notes):
        note["total"] = note.get("total", 0.0) + float(out)


@step("Small/Reserved")
@param("runtime", "number", default=1)
def reserved(ctx, data):
    """A parameter named like the run settings block."""
    data["runtime"] = ctx.runtime
