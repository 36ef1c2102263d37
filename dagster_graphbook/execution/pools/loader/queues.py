"""The order of a loader's batches and the queues they come back on.

Batches are consecutive item indices in input order (``batches``); ``Tasks`` is the DataLoader's
batch sampler, re-aimed at each chunk of a stream. The result queues of a start method's context
(``loader_context``) never drop a batch whose values do not pickle: those items fail instead.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.queues
import traceback
from multiprocessing.reduction import ForkingPickler
from typing import Any, Dict, Iterator, List, Optional, Type

from torch.utils.data import BatchSampler, SequentialSampler

from .dataset import SentItem
from .loaded import LoadedBatch


def batches(n: int, batch_size: int) -> BatchSampler:
    """Consecutive index lists: batches cross note boundaries, order is input order."""
    return BatchSampler(SequentialSampler(range(n)), batch_size, drop_last=False)


class Tasks:
    """The DataLoader's batch sampler: the current chunk's batches, as item indices when the
    workers were forked with its items (or load in this process), else as ``SentItem`` items."""

    def __init__(self, n: int, batch_size: int):
        self.batch_size = batch_size
        self.ranges = batches(n, batch_size)
        self.sent: Optional[List[SentItem]] = None

    def send(self, n: int, sent: Optional[List[SentItem]]) -> None:
        self.ranges, self.sent = batches(n, self.batch_size), sent

    def __iter__(self) -> Iterator[List[Any]]:
        sent = self.sent
        for r in self.ranges:
            yield r if sent is None else [sent[i] for i in r]

    def __len__(self) -> int:
        return len(self.ranges)


class _ResultQueue(multiprocessing.queues.Queue):
    """DataLoader's queues, made by ``loader_context``: a worker's batch whose values do not pickle
    (a generator, an open file) comes back as those items' errors. multiprocessing's feeder thread
    would print the error and drop the batch, and the step would wait for it forever."""

    def _on_queue_feeder_error(self, e: Exception, obj: object) -> None:
        if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], LoadedBatch):
            self.put((obj[0], _without_unpicklable(obj[1], e)))
        else:  # what multiprocessing does
            traceback.print_exception(e)


def _without_unpicklable(batch: LoadedBatch, exc: Exception) -> LoadedBatch:
    """``batch`` without the values that do not pickle; their items fail, naming the problem."""
    indices, values, errors = [], [], list(batch.errors)
    if batch.values is None:  # a stacked batch that did not pickle (never seen): all its items
        errors += [(i, _UNPICKLABLE.format(error=repr(exc), i=i)) for i in batch.indices]
        return LoadedBatch([], [], None, sorted(errors))
    for i, value in zip(batch.indices, batch.values):
        try:
            ForkingPickler.dumps(value)
        except Exception as e:  # noqa: BLE001 - whatever pickling raises
            errors.append((i, _UNPICKLABLE.format(error=f"{type(e).__name__}: {e}", i=i)))
        else:
            indices.append(i)
            values.append(value)
    return LoadedBatch(indices, values, None, sorted(errors))


_UNPICKLABLE = (
    "{error}\nload_fn's value for item {i} cannot be pickled back to the step process from its "
    "loader worker process: return values that pickle (tensors, arrays, plain data), or set "
    "worker_type: thread"
)


class _ResultQueues:
    """Mixed into a start method's context: its ``Queue()`` is a ``_ResultQueue``."""

    def Queue(self, maxsize: int = 0) -> _ResultQueue:  # noqa: N802 - multiprocessing's name
        return _ResultQueue(maxsize, ctx=self)


class _LoaderForkContext(_ResultQueues, multiprocessing.context.ForkContext):
    pass


class _LoaderSpawnContext(_ResultQueues, multiprocessing.context.SpawnContext):
    pass


class _LoaderForkServerContext(_ResultQueues, multiprocessing.context.ForkServerContext):
    pass


_CONTEXTS: Dict[str, Type[multiprocessing.context.BaseContext]] = {
    "fork": _LoaderForkContext,
    "spawn": _LoaderSpawnContext,
    "forkserver": _LoaderForkServerContext,
}


def loader_context(start_method: str) -> multiprocessing.context.BaseContext:
    """The start method's context, with queues that never drop a batch (``_ResultQueue``)."""
    return _CONTEXTS[start_method]()
