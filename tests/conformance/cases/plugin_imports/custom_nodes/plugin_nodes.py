"""Node file using a plugin package that sits in the workflow folder (on sys.path in Graphbook)."""

from plugin_pkg import Greeting, ImageTagger  # noqa: F401  (registered by class name)

from graphbook import param, source, step


@step("Numbers")
@source()
@param("count", type="number", default=3)
def numbers(ctx):
    for i in range(ctx.count):
        yield {"out": {"i": i}}
