"""The loader pool: ``load_fn`` over the items of all input notes, in batches, in input order.

Processes: ``torch.utils.data.DataLoader`` (its worker loop, index queues, shared-memory tensors
and worker-death detection) over a map-style dataset with an explicit start method. Threads: the
same batches from a small thread pool, for ``load_fn``s that release the GIL (PIL, torch).
Items that fail come back as error records so the step can apply its error policy.
"""

from __future__ import annotations

import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch.utils.data import DataLoader, Dataset

from .workers import init_worker


class LoadedBatch(NamedTuple):
    """One batch as it leaves the pool: same-shape tensors travel as one stacked block."""

    indices: List[int]  # item indices that loaded, in order
    values: Optional[List[Any]]  # loaded values, or None when stacked
    stacked: Optional[torch.Tensor]  # [len(indices), ...] when every value was a same-shape tensor
    errors: List[Tuple[int, str]]  # (item index, traceback) for items whose load_fn raised

    def outputs(self) -> List[Any]:
        if self.stacked is not None:
            return list(self.stacked.unbind(0))
        return list(self.values or [])


class ItemDataset(Dataset):
    """Item ``i`` is ``load_fn(items[i], **params)``, or the traceback if it raised."""

    def __init__(self, items: Sequence[Any], load_fn: Callable[..., Any], params: Dict[str, Any]):
        self.items = items
        self.load_fn = load_fn
        self.params = params

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Tuple[int, Any, Optional[str]]:
        try:
            return i, self.load_fn(self.items[i], **self.params), None
        except Exception:
            return i, None, traceback.format_exc()


def collate(samples: List[Tuple[int, Any, Optional[str]]]) -> LoadedBatch:
    """Keep lists (Graphbook hands ``outputs`` as a list); stack same-shape tensors into one block."""
    ok = [(i, v) for i, v, err in samples if err is None]
    errors = [(i, err) for i, _, err in samples if err is not None]
    indices = [i for i, _ in ok]
    values = [v for _, v in ok]
    if len(values) > 1 and all(isinstance(v, torch.Tensor) for v in values):
        first = values[0]
        if all(v.shape == first.shape and v.dtype == first.dtype and v.device == first.device for v in values):
            return LoadedBatch(indices, None, torch.stack(values), errors)
    return LoadedBatch(indices, values, None, errors)


def _batch_ranges(n: int, batch_size: int) -> List[range]:
    return [range(s, min(s + batch_size, n)) for s in range(0, n, batch_size)]


class _BatchSampler:
    """Consecutive index ranges: batches cross note boundaries, order is input order."""

    def __init__(self, n: int, batch_size: int):
        self.ranges = _batch_ranges(n, batch_size)

    def __iter__(self) -> Iterator[List[int]]:
        return (list(r) for r in self.ranges)

    def __len__(self) -> int:
        return len(self.ranges)


# DataLoader checks worker liveness each time a wait for data times out. Its own interval is 5 s
# (and its SIGCHLD handler only works in the main thread), so wait in short slices instead: a
# dead worker is then reported within about a second.
LIVENESS_CHECK_S = 1.0
_TIMED_OUT = "DataLoader timed out"


class ProcessLoader:
    """Batches from a DataLoader with ``num_workers`` processes started with ``start_method``."""

    def __init__(self, dataset: ItemDataset, batch_size: int, num_workers: int, prefetch: int, start_method: str, pin_memory: bool, node: Tuple[str, str]):
        kwargs: Dict[str, Any] = {}
        if num_workers > 0:
            kwargs = dict(prefetch_factor=max(1, prefetch), multiprocessing_context=start_method, worker_init_fn=_WorkerInit(*node), persistent_workers=False, timeout=LIVENESS_CHECK_S)
        self.loader = DataLoader(dataset, batch_sampler=_BatchSampler(len(dataset), batch_size), num_workers=num_workers, collate_fn=collate, pin_memory=pin_memory, **kwargs)
        self._it: Optional[Iterator[LoadedBatch]] = None

    def __iter__(self) -> Iterator[LoadedBatch]:
        self._it = iter(self.loader)
        while True:
            try:
                yield next(self._it)
            except StopIteration:
                return
            except RuntimeError as exc:
                if not str(exc).startswith(_TIMED_OUT):
                    raise  # e.g. "DataLoader worker (pid(s) ...) exited unexpectedly"
                # a slow batch, not a dead worker: keep waiting (the iterator state is unchanged)

    def in_flight(self) -> Optional[int]:
        """Batches requested from workers but not yet consumed (DataLoader keeps this privately)."""
        return getattr(self._it, "_tasks_outstanding", None)

    def close(self) -> None:
        """Stop and join the workers now (not at garbage collection: a failed op may keep the iterator alive)."""
        shutdown = getattr(self._it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self._it = None


class _WorkerInit:
    """Picklable DataLoader ``worker_init_fn``."""

    def __init__(self, node_id: str, node_name: str):
        self.node = (node_id, node_name)

    def __call__(self, worker_id: int) -> None:
        init_worker(*self.node)


def _load_range(dataset: ItemDataset, indices: range) -> LoadedBatch:
    return collate([dataset[i] for i in indices])


class ThreadLoader:
    """Batches loaded by a thread pool, at most ``num_workers * prefetch`` batches ahead."""

    def __init__(self, dataset: ItemDataset, batch_size: int, num_workers: int, prefetch: int):
        self.dataset = dataset
        self.ranges = _batch_ranges(len(dataset), batch_size)
        self.num_workers = max(1, num_workers)
        self.depth = self.num_workers * max(1, prefetch)
        self.pool: Optional[ThreadPoolExecutor] = None
        self.pending: deque = deque()

    def __iter__(self) -> Iterator[LoadedBatch]:
        self.pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="graphbook-load")
        ranges = iter(self.ranges)
        for r in ranges:
            self.pending.append(self.pool.submit(_load_range, self.dataset, r))
            if len(self.pending) >= self.depth:
                break
        while self.pending:
            batch = self.pending.popleft().result()
            nxt = next(ranges, None)
            if nxt is not None:
                self.pending.append(self.pool.submit(_load_range, self.dataset, nxt))
            yield batch

    def in_flight(self) -> int:
        return len(self.pending)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.pending.clear()


class SyncBatches:
    """A BatchStep without ``load_fn``: raw items in batches, ``outputs`` is None (Graphbook's sync path)."""

    def __init__(self, items: Sequence[Any], batch_size: int):
        self.items = items
        self.ranges = _batch_ranges(len(items), batch_size)

    def __iter__(self) -> Iterator[LoadedBatch]:
        for r in self.ranges:
            yield LoadedBatch(list(r), None, None, [])

    def in_flight(self) -> int:
        return 0

    def close(self) -> None:
        pass
