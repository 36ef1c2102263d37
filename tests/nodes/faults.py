"""Nodes of tests/e2e/test_reliability_faults.py (FAULT_NODES)."""

import os
import time

from graphbook import batch, param, source, step


@step("Fault/Items")
@source()
@param("n", "number", default=40)
@param("per_note", "number", default=10)
def items(ctx):
    n, k = int(ctx.n), int(ctx.per_note)
    for start in range(0, n, k):
        yield {"out": {"id": start // k, "items": list(range(start, min(n, start + k)))}}


def _mark(ctx, kind):
    if ctx.pid_dir:
        open(os.path.join(ctx.pid_dir, f"{kind}-{os.getpid()}"), "w").close()


def slow_load(ctx, item):
    _mark(ctx, "load")
    time.sleep(ctx.delay)
    return item * 10


def write_dump(ctx, path, value):
    _mark(ctx, "dump")
    time.sleep(ctx.delay)
    if value == ctx.bad_dump * 10:
        raise ValueError(f"cannot write {value}")
    with open(path, "w") as f:
        f.write(f"{value}\n")
    return path


@step("Fault/Work")
@batch(4, "items", load_fn=slow_load, dump_fn=write_dump)
@param("out_dir", "string", default="")
@param("pid_dir", "string", default="")
@param("delay", "number", default=0.0)
@param("bad_dump", "number", default=-1)
@param("explode_at", "number", default=-1)
@param("full_item", "number", default=-1)
@param("fail_once_marker", "string", default="")
def work(ctx, outputs, items, notes):
    if ctx.explode_at in items:
        raise RuntimeError(f"model exploded on {int(ctx.explode_at)}")
    if ctx.fail_once_marker and items[0] >= 20 and not os.path.exists(ctx.fail_once_marker):
        open(ctx.fail_once_marker, "w").close()  # the next attempt goes through
        raise RuntimeError("transient failure on the first attempt")
    for out, note in zip(outputs, notes):
        note.setdefault("loaded", []).append(out)
    if not ctx.out_dir:
        return None

    def path(item):
        full = item == ctx.full_item
        return "/dev/full" if full else os.path.join(ctx.out_dir, f"{item}.txt")

    return [(path(item), out) for item, out in zip(items, outputs)]
