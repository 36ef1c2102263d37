"""Nodes of tests/cli/test_main.py (TYPED_NODES)."""

import json

from graphbook import param, source, step


@step("Cli/Typed")
@source()
@param("text", "string", default="a")
@param("count", "int", default=1)
@param("scale", "number", default=1.0)
@param("flag", "boolean", default=False)
@param("tags", "list[string]", default=[])
@param("dump", "string", default="")
def typed(ctx):
    seen = {k: getattr(ctx, k) for k in ("text", "count", "scale", "flag", "tags")}
    with open(ctx.dump, "w") as f:
        json.dump({k: [v, type(v).__name__] for k, v in seen.items()}, f)
    yield {"out": {"i": 1}}
