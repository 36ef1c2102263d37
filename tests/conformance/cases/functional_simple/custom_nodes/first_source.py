from graphbook import param, source, step


@step("Custom/MyFirstSource")
@source()
@param("message", type="string", default="Hello, World!")
@param("amount", type="number", default=10)
def my_first_source(ctx):
    for i in range(ctx.amount):
        yield {"out": {"message": ctx.message, "i": i}}
