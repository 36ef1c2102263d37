"""Nodes of tests/execution/test_step_op.py (NODES)."""

import os
import time

import torch

from dagster_graphbook.authoring.files import atomic_path
from graphbook import batch, param, source, step


@step("Op/Items")
@source()
@param("n", "number", default=24)
@param("per_note", "number", default=5)
def items(ctx):
    n, k = int(ctx.n), int(ctx.per_note)
    for start in range(0, n, k):
        yield {"out": {"id": start // k, "items": list(range(start, min(n, start + k)))}}


def tensor_load(ctx, item):
    if ctx.pid_dir:
        open(os.path.join(ctx.pid_dir, f"load-{os.getpid()}"), "w").close()
    time.sleep(ctx.delay)
    return torch.full((3, 64, 64), float(item))


def atomic_dump(ctx, path, value):
    if ctx.pid_dir:
        open(os.path.join(ctx.pid_dir, f"dump-{os.getpid()}"), "w").close()
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(f"{value}\n")
            f.flush()
            time.sleep(ctx.delay)  # other dumps are in flight when one fails
            if value == ctx.fail_once_at and not os.path.exists(ctx.marker):
                open(ctx.marker, "w").close()
                raise OSError(f"storage went away while writing {path}")
            f.write("end\n")
    return path


@step("Op/Work")
@batch(4, "items", load_fn=tensor_load, dump_fn=atomic_dump)
@param("out_dir", "string", default="")
@param("pid_dir", "string", default="")
@param("delay", "number", default=0.0)
@param("fail_once_at", "number", default=-1)
@param("marker", "string", default="")
def work(ctx, outputs, items, notes):
    for out, note in zip(outputs, notes):
        note.setdefault("means", []).append(float(out.mean()))
        note.setdefault("device", str(out.device))
    if not ctx.out_dir:
        return None
    return [
        (os.path.join(ctx.out_dir, f"{item}.txt"), float(out[0, 0, 0]))
        for item, out in zip(items, outputs)
    ]
