from graphbook import param, source, step


@step("Numbers")
@source()
@param("count", type="number", default=3)
def numbers(ctx):
    for i in range(ctx.count):
        yield {"out": {"i": i, "trail": []}}


@step("AddOne")
def add_one(ctx, data):
    data["i"] += 1
    data["trail"].append("AddOne")


@step("Double")
def double(ctx, data):
    data["i"] *= 2
    data["trail"].append("Double")


@step("Collect")
def collect(ctx, data):
    data["trail"].append("Collect")
