"""Nodes of tests/defs/test_executor.py (ENV_NODES)."""

import os

from graphbook import param, source, step


@step("E/Env")
@source()
@param("out", "string")
def env(ctx):
    with open(ctx.out, "w") as f:
        f.write(os.environ.get("GRAPHBOOK_FORKSERVER_TEST_VAR", "<unset>"))
    yield {"out": {"pid": os.getpid()}}
