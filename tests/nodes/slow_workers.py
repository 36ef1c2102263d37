"""Nodes of tests/execution/pools/test_workers.py (SLOW_NODES)."""

import os
import time

from graphbook import param, source, step


@step("Z/Slow")
@source()
@param("out", "string")
def slow(ctx):
    with open(ctx.out + ".started", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(1.5)
    with open(ctx.out, "w") as f:
        f.write("done")
    yield {"out": {"pid": os.getpid()}}
