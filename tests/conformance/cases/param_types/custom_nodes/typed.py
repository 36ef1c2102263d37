from graphbook import param, source, step


@step("Numbers")
@source()
@param("count", type="number", default=3)
def numbers(ctx):
    for i in range(ctx.count):
        yield {"out": {"i": i}}


@step("Typed")
@param("flag", type="boolean", default=True)
@param("ratio", type="number", default=1)
@param("n", type="number", default=7)
@param("words", type="list[string]", default=[])
@param("opts", type="dict", default={})
def typed(ctx, data):
    names = ("flag", "ratio", "n", "words", "opts")
    data["types"] = {k: type(getattr(ctx, k)).__name__ for k in names}
    data["flag"], data["n"], data["opts"] = ctx.flag, ctx.n, ctx.opts
