from graphbook import param, source, step


@step("Numbers")
@source()
@param("count", type="number", default=3)
def numbers(ctx):
    for i in range(ctx.count):
        yield {"out": {"i": i}}


@step("UseResources")
@param("words", type="resource")
@param("table", type="resource")
@param("factor", type="resource")
@param("title", type="resource")
def use_resources(ctx, data):
    data["words"], data["table"], data["title"] = ctx.words, ctx.table, ctx.title
    data["scaled"] = data["i"] * ctx.factor
    data["types"] = [type(getattr(ctx, k)).__name__ for k in ("words", "table", "factor", "title")]
