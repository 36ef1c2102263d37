"""Nodes of tests/execution/test_step_op.py (OOM_NODES)."""

import os

import torch

from graphbook import batch, param, source, step


@step("Oom/Items")
@source()
def items(ctx):
    yield {"out": {"items": [1, 2, 3]}}


@step("Oom/Model")
@batch(2, "items")
@param("calls", "string", default="")
def model(ctx, outputs, items, notes):
    open(os.path.join(ctx.calls, str(len(os.listdir(ctx.calls)))), "w").close()
    # what a CUDA library's own allocation raises (cuBLAS, nvJPEG): no OutOfMemoryError type
    raise torch.AcceleratorError("CUDA error: out of memory")
