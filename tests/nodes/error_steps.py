"""Nodes of tests/test_errors.py (NODES)."""

import os
import signal
import time

from graphbook import batch, param, source, step


@step("Fl/Items")
@source()
@param("n", "number", default=6)
def items(ctx):
    for i in range(int(ctx.n)):
        yield {"out": {"id": i, "items": [i]}}


@step("Fl/Plain")
@param("bad", "number", default=-1)
def plain(ctx, data):
    if data["id"] == ctx.bad:
        raise ValueError(f"cannot handle {data['id']}")


def load(ctx, item):
    if item == ctx.load_error:
        raise OSError(f"unreadable {item}")
    if item == ctx.hang:
        time.sleep(30)
    if item == ctx.die_load:
        os.kill(os.getpid(), signal.SIGKILL)
    return item * 10


def dump(ctx, value):
    if value == ctx.dump_error * 10:
        raise ValueError(f"cannot write {value}")
    if value == ctx.die_dump * 10:
        os.kill(os.getpid(), signal.SIGKILL)
    return None


@step("Fl/Work")
@batch(2, "items", load_fn=load, dump_fn=dump)
@param("load_error", "number", default=-1)
@param("hang", "number", default=-1)
@param("die_load", "number", default=-1)
@param("model_error", "number", default=-1)
@param("dump_error", "number", default=-1)
@param("die_dump", "number", default=-1)
def work(ctx, outputs, items, notes):
    if ctx.model_error in items:
        raise RuntimeError(f"model exploded on {int(ctx.model_error)}")
    return [(int(out),) for out in outputs]
