"""Errors of step runs: the CUDA-in-fork hint a worker adds to torch's plain RuntimeError."""

from __future__ import annotations

import pytest
import torch


def _starts_cuda(item):
    torch.cuda._lazy_init()  # what a CUDA tensor in a forked worker does first
    return item


def _bad_fork():
    return True


def test_cuda_in_a_forked_worker_gets_the_hint(monkeypatch):
    """torch refuses CUDA in a fork of a process that started it, with a plain RuntimeError; the
    worker adds the hint (here the fork state is faked: it needs a GPU)."""
    from dagster_graphbook.execution.errors import CUDA_FORK_HINT, cuda_fork_hint
    from dagster_graphbook.execution.pools.dump_pool import _call
    from dagster_graphbook.execution.pools.loader import ItemDataset

    if torch.cuda.is_initialized():
        pytest.skip("CUDA already started in this process: _lazy_init raises nothing")

    def raises_other(item):
        raise RuntimeError("unrelated")

    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", _bad_fork)
    _, _, tb = ItemDataset([1], _starts_cuda, {})[0]
    assert "RuntimeError" in tb and tb.endswith(f"\nHint: {CUDA_FORK_HINT}\n")
    error, _ = _call((1,), _starts_cuda)
    assert error.endswith(f"\nHint: {CUDA_FORK_HINT}\n")
    _, _, other = ItemDataset([1], raises_other, {})[0]
    assert CUDA_FORK_HINT not in other  # another error in a bad fork: no hint
    with pytest.raises(RuntimeError) as info:
        _starts_cuda(1)
    monkeypatch.undo()  # not a forked worker: no hint
    assert cuda_fork_hint(info.value) == ""
