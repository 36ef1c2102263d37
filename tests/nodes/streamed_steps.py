"""Nodes of tests/execution/test_stream.py (NODES)."""

import os
import time

import torch

from graphbook import batch, event, param, source, step


def trace(path, line):
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


@step("S/Numbers")
@source()
@param("n", "number", default=3)
@param("trace", "string", default="")
def numbers(ctx):
    for i in range(int(ctx.n)):
        trace(ctx.trace, f"{ctx.id} {i}")
        yield {"out": {"i": i, "paths": [f"img-{i}"]}}


@step("S/Mark")
@param("trace", "string", default="")
@param("fail_at", "number", default=-1)
@param("delay", "number", default=0.0)
def mark(ctx, note):
    if note["i"] == ctx.fail_at:
        raise ValueError(f"cannot mark {note['i']}")
    time.sleep(ctx.delay)
    trace(ctx.trace, f"{ctx.id} {note['i']}")


def load_image(ctx, item):
    if ctx.pid_dir:
        open(os.path.join(ctx.pid_dir, f"load-{os.getpid()}"), "w").close()
    if item == ctx.bad_item:
        raise OSError(f"unreadable image {item}")
    if item == ctx.kill_item:
        os.kill(os.getpid(), 9)  # as the kernel's OOM killer would
    time.sleep(ctx.delay)
    return torch.full((3, 64, 64), float(item.split("-")[1]))


def dump_size(ctx, path, tensor):
    # what crossed into the dump process: the tensor's own bytes, or its whole batch?
    with open(path, "w") as f:
        f.write(f"{tensor.untyped_storage().nbytes()} {tensor.numel() * tensor.element_size()}")
    return path


@step("S/LoadImages")
@batch(8, "paths", load_fn=load_image, dump_fn=dump_size)
@param("out_dir", "string", default="")
@param("pid_dir", "string", default="")
@param("bad_item", "string", default="")
@param("kill_item", "string", default="")
@param("delay", "number", default=0.0)
def load_images(ctx, tensors, items, notes):
    for tensor, note in zip(tensors, notes):
        note.setdefault("tensor", []).append(tensor)  # the Batch Data guide's pattern
    if ctx.out_dir:
        paths = [os.path.join(ctx.out_dir, f"{item}.txt") for item in items]
        return list(zip(paths, tensors))
    return None


def ended(ctx):
    trace(ctx.trace, f"on_end {ctx.id} failed={ctx.run_failed}")


@step("S/Reduce")
@param("trace", "string", default="")
@param("delay", "number", default=0.0)
@event("on_end", ended)
def reduce(ctx, note):
    time.sleep(ctx.delay)
    note["mean"] = float(sum(t.mean() for t in note.pop("tensor", [])))
    trace(ctx.trace, f"{ctx.id} {note['i']}")
