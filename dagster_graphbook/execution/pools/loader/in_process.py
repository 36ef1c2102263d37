"""Batches made in the step process: on a small thread pool (``ThreadLoader``, for
``load_fn``s that release the GIL: PIL, torch), or as raw items for a batch step without
``load_fn`` (``SyncBatches``, Graphbook's sync path).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, List, Optional, Sequence

from ....plan.settings import BatchRuntime
from ..io_calls import own_pool
from ..threads import pool_thread_ids
from ..workers import PoolNice
from .dataset import ItemDataset, close_io_pool
from .loaded import LoadedBatch, collate, split_samples
from .queues import batches


def _load_range(dataset: ItemDataset, indices: List[int], stack: bool) -> LoadedBatch:
    """One batch in a loader thread. Stacking only pays off for the one copy to a GPU: on the CPU
    the values stay as loaded (no extra copy of the batch)."""
    samples = dataset.__getitems__(indices)
    if stack:
        return collate(samples)
    indices_ok, values, errors = split_samples(samples)
    return LoadedBatch(indices_ok, values, None, errors)


class ThreadLoader:
    """Batches loaded by a thread pool, at most ``num_workers * prefetch`` batches ahead."""

    def __init__(
        self, dataset: ItemDataset, batch_size: int, settings: BatchRuntime, stack: bool = False
    ):
        self.dataset = dataset
        self.nice = PoolNice(settings.worker_nice)
        self.stack = stack
        self.ranges = batches(len(dataset), batch_size)
        self.num_workers = max(1, settings.num_workers)
        self.depth = self.num_workers * max(1, settings.prefetch)
        self.pool: Optional[ThreadPoolExecutor] = None
        self.pending: deque = deque()

    def __iter__(self) -> Iterator[LoadedBatch]:
        self.pool = ThreadPoolExecutor(
            self.num_workers,
            thread_name_prefix="graphbook-load",
            initializer=self.nice.thread_started,
        )
        if self.dataset.io_threads > 1:  # items on URLs: threads of their own (io_calls.py)
            self.dataset.io_pool = own_pool(self.dataset.io_threads, "load")
        ranges = iter(self.ranges)
        for r in ranges:
            self.pending.append(self.pool.submit(_load_range, self.dataset, r, self.stack))
            if len(self.pending) >= self.depth:
                break
        while self.pending:
            batch = self.pending.popleft().result()
            nxt = next(ranges, None)
            if nxt is not None:
                self.pending.append(self.pool.submit(_load_range, self.dataset, nxt, self.stack))
            yield batch

    def lower(self, by: int) -> None:
        """Lower the threads' priority by ``by`` nice levels (see ``priority.py``)."""
        self.nice.lower(pool_thread_ids(self.pool) if self.pool is not None else [], by)

    def in_flight(self) -> int:
        return len(self.pending)

    def close(self) -> None:
        close_io_pool(self.dataset)
        if self.pool is not None:
            # a load_fn stuck in C code (a read on a stalled mount) never returns: wait a little,
            # then leave its thread behind rather than hang the step's end (see threads.py)
            from ..threads import shut_down_threads

            shut_down_threads(self.pool, "graphbook-load")
            self.pool = None
        self.pending.clear()


class SyncBatches:
    """A BatchStep without ``load_fn``: raw items in batches, ``outputs`` is None (Graphbook's sync
    path)."""

    def __init__(self, items: Sequence[Any], batch_size: int):
        self.items = items
        self.ranges = batches(len(items), batch_size)

    def __iter__(self) -> Iterator[LoadedBatch]:
        for indices in self.ranges:
            yield LoadedBatch(indices, None, None, [])

    def in_flight(self) -> int:
        return 0

    def close(self) -> None:
        pass
