"""Nodes of tests/defs/test_executor.py (CWD_NODES)."""

import os

from graphbook import param, source, step


@step("C/Cwd")
@source()
@param("out", "string")
def cwd(ctx):
    with open(ctx.out, "w") as f:
        f.write(os.getcwd())
    yield {"out": {"pid": os.getpid()}}
