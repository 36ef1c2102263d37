from graphbook import param, source, step


@step("Numbers")
@source()
@param("count", type="number", default=3)
def numbers(ctx):
    """Notes {"i": 0..count-1}; range() needs an int count."""
    for i in range(ctx.count):
        yield {"out": {"i": i}}


@step("Tag")
def tag(ctx, data):
    """Appends to a trail, so fan-in order and copies show in the notes."""
    data["seen"] = data.get("seen", 0) + 1
