"""What runs in a loader worker process besides ``load_fn``: its start-up (``WorkerInit``) and
the collate that writes its stacked batches into its own ring (``WorkerCollate``).

torch's DataLoader runs the worker loop itself (``torch/utils/data/_utils/worker.py``); these
are the two hooks it calls there.
"""

from __future__ import annotations

import multiprocessing.util
import os
from typing import Any, List, Optional, Tuple

import torch
from torch.utils.data import get_worker_info

from ..workers import init_worker
from .loaded import LoadedBatch, split_samples, stackable
from .ring import SlabRing

_RING: Optional[SlabRing] = None  # this worker process's ring (made on first use)


class WorkerCollate:
    """The DataLoader ``collate_fn``: in a worker, stacked batches go into its ``SlabRing``."""

    def __init__(self, slots: int, budget: Optional[int] = None):
        self.slots = slots
        self.budget = budget

    def __call__(self, samples: List[Tuple[int, Any, Optional[str]]]) -> LoadedBatch:
        global _RING
        info = get_worker_info()
        indices, values, errors = split_samples(samples)
        if not stackable(values) or values[0].device.type != "cpu":
            return LoadedBatch(indices, values, None, errors)
        if info is None:  # num_workers=0: no transport at all
            return LoadedBatch(indices, None, torch.stack(values), errors)
        if _RING is None:
            _RING = SlabRing(self.slots, self.budget)
        return LoadedBatch(indices, None, _RING.put(info.id, values), errors)


class WorkerInit:
    """Picklable DataLoader ``worker_init_fn``."""

    def __init__(self, node_id: str, node_name: str, nice: int = 0):
        self.node = (node_id, node_name)
        self.nice = nice
        self.step_pid = os.getpid()  # made in the step process

    def __call__(self, worker_id: int) -> None:
        global _RING
        _RING = None  # never a ring inherited through fork
        # at the worker's exit, before its os._exit: under torch's file_system sharing strategy a
        # block's /dev/shm file goes only when every process that held it let go
        multiprocessing.util.Finalize(None, _drop_ring, exitpriority=0)
        init_worker(*self.node, nice=self.nice, step_pid=self.step_pid)


def _drop_ring() -> None:
    global _RING
    _RING = None
