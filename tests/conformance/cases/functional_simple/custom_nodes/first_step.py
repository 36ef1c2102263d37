from graphbook import event, output, param, step


def route(ctx, data):
    """Deterministic stand-in for the example's random draw against prob."""
    if (data["i"] * 37 % 10) / 10 < ctx.prob:
        return "A"
    return "B"


@step("Custom/MyFirstStep")
@param("prob", type="resource")
@output("A", "B")
@event("route", route)
def my_first_step(ctx, data):
    ctx.log(data["message"])
    data["prob_type"] = type(ctx.prob).__name__
