"""Nodes of tests/e2e/test_soak.py (SOAK_NODES)."""

import os

import torch

from graphbook import batch, param, source, step


@step("Soak/Items")
@source()
@param("notes", "number", default=10)
@param("per_note", "number", default=5)
def items(ctx):
    k = int(ctx.per_note)
    for n in range(int(ctx.notes)):
        yield {"out": {"id": n, "items": list(range(n * k, n * k + k))}}


def load_item(ctx, item):
    # same shape: batches travel as one shared block
    return torch.tensor([item, 2 * item], dtype=torch.int64)


def dump_item(ctx, item, doubled):
    with open(os.path.join(ctx.dump_dir, f"{os.getpid()}.txt"), "a") as f:
        f.write(f"{item} {doubled}\n")


@step("Soak/Work")
@batch(64, "items", load_fn=load_item, dump_fn=dump_item)
@param("dump_dir", "string", default="")
def work(ctx, outputs, items, notes):
    for out, item, note in zip(outputs, items, notes):
        if int(out[0]) != item:
            raise ValueError(f"item {item} came back as {out.tolist()}")
        note.setdefault("done", []).append(item)
    return [(item, int(out[1])) for out, item in zip(outputs, items)]
