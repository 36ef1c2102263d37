from graphbook import event, output, step


def route(ctx, data):
    return "C" if data["i"] % 2 else "A"


@step("Router")
@output("A", "B")
@event("route", route)
def router(ctx, data):
    data["routed"] = True
