"""Nodes of tests/execution/pools/test_workers.py (SLEEP_NODES)."""

import os
import time

from graphbook import param, source, step


@step("Z/Sleeper")
@source()
@param("out", "string")
def sleeper(ctx):
    with open(ctx.out, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)
    yield {"out": {"pid": os.getpid()}}
