"""Loader worker processes: a ``torch.utils.data.DataLoader`` over the items, its lifecycle
from start to shutdown, and worker death found and raised as one ``WorkerDied``.

DataLoader brings the worker loop, the index queues, the ordering and its own liveness checks;
here it waits in short slices (a dead worker is reported within about a second), copies or lends
each stacked batch out of its worker's ring (``ring.py``), keeps its workers across a stream's
chunks (``aim``) and stops them at ``close``.
"""

from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch.utils.data import DataLoader

from ....errors import Label
from ....plan.settings import BatchRuntime
from ....store.tensors import map_tensors
from ...errors import WorkerDied
from ..io_calls import own_pool
from ..torch_internals import (
    BatchNotReady,
    forget_worker_pids,
    keep_out_sigchld_handler,
    loader_workers,
    shutdown_workers,
    storage_refs,
    tasks_outstanding,
    wait_in_slices,
)
from ..workers import renice
from .dataset import ItemDataset, close_io_pool, sent_items
from .loaded import LoadedBatch
from .queues import Tasks, loader_context
from .ring import (
    SHM_HELP,
    PipedBatch,
    SlabRef,
    check_stamp,
    lent_view,
    retired,
    shm_budget,
    slot_view,
)
from .worker import WorkerCollate, WorkerInit

# DataLoader checks worker liveness each time a wait for data times out. Its own interval is 5 s
# (and its SIGCHLD handler only works in the main thread), so wait in short slices instead
# (``wait_in_slices``): a dead worker is then reported within about a second.
LIVENESS_CHECK_S = 1.0


def _drop_frame_locals(exc: BaseException) -> None:
    """Clear the locals of the frames in ``exc``'s traceback chain (file and line stay for the
    report).

    Dagster keeps a failed step's exception; through its traceback the frames would keep the
    DataLoader iterator, and with it the pipes of its worker queues, alive after the op ended.
    """
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__


class ProcessLoader:
    """Batches from a DataLoader with ``num_workers`` processes started with ``start_method``."""

    def __init__(
        self,
        dataset: ItemDataset,
        batch_size: int,
        settings: BatchRuntime,
        *,
        pin_memory: bool,
        node: Tuple[str, str],
        ring_slots: Optional[int] = None,
        warn: Optional[Callable[[str], None]] = None,
        label: Label = "batch step",
        keep: bool = False,
    ):
        """``keep``: the workers serve later chunks too (``aim``), until ``close``."""
        kwargs: Dict[str, Any] = {}
        num_workers, prefetch = settings.num_workers, max(1, settings.prefetch)
        if num_workers > 0:
            kwargs = dict(
                prefetch_factor=prefetch,
                multiprocessing_context=loader_context(settings.start_method),
                worker_init_fn=WorkerInit(*node, settings.worker_nice),
                persistent_workers=keep,
            )
        # slots per worker: the batch the step holds, and the ``prefetch`` a worker can be ahead
        # (each block costs ~5 ms to make and send: about 4 images' loading)
        budget = shm_budget(num_workers) if num_workers > 0 else None  # sized from free /dev/shm
        collate_fn = WorkerCollate(ring_slots or prefetch + 1, budget)
        self.warn = warn
        self.label = label  # names the step in a WorkerDied
        self.loaded = 0  # items of the batches handed out (the step has finished with them)
        self.piped = 0  # batches that came through the pipe fallback
        # pinning happens at the copy out of the ring (DataLoader's pin thread would copy blocks)
        self.dataset = dataset
        if num_workers == 0 and dataset.io_threads > 1:  # loads in this process: threads of its own
            dataset.io_pool = own_pool(dataset.io_threads, "load")
        self.tasks = Tasks(len(dataset), batch_size)
        self.loader = DataLoader(
            dataset,
            batch_sampler=self.tasks,
            num_workers=num_workers,
            collate_fn=collate_fn,
            pin_memory=False,
            **kwargs,
        )
        self.pin = pin_memory
        self.blocks: Dict[Tuple[int, int], torch.Tensor] = {}  # (worker, slot) -> shared block
        # CPU batches are lent: the step reads the ring slot itself, no copy (see ``_take_back``)
        self.lend = not pin_memory
        self._lent: Optional[SlabRef] = None
        self._it: Optional[Iterator[LoadedBatch]] = None

    def aim(self, dataset: ItemDataset) -> bool:
        """Load ``dataset``'s items next (a stream's next chunk), with the same workers; False
        when an item or ``load_fn_params`` does not pickle (a lock, an open handle): only workers
        forked with them can load them, so the caller starts new ones."""
        if self.loader.num_workers == 0:  # loaded in this process: the items as they are
            held = self.loader.dataset  # a DataLoader's dataset cannot be replaced
            assert isinstance(held, ItemDataset)
            held.items, held.params = dataset.items, dataset.params
            self.dataset, self.loaded = held, 0
            self.tasks.send(len(dataset), None)
            return True
        try:
            sent = sent_items(dataset)
        except Exception:  # noqa: BLE001 - whatever pickling raises (TypeError, PicklingError...)
            return False
        self.dataset, self.loaded = dataset, 0
        self.tasks.send(len(dataset), sent)
        return True

    def __iter__(self) -> Iterator[LoadedBatch]:
        keep_out_sigchld_handler()
        if self._it is not None:  # kept workers: their restart waits in torch's own slices
            wait_in_slices(self._it, None)
        with self._deaths_named():  # a kept worker may have died between chunks
            self._it = iter(self.loader)
        wait_in_slices(self._it, LIVENESS_CHECK_S)
        while True:
            try:
                with self._deaths_named():
                    batch = next(self._it)
            except StopIteration:
                return
            except BatchNotReady:
                dead = self._dead_workers()
                if dead:  # died after torch's own check in this wait
                    raise self._died(dead) from None
                # a slow batch, not a dead worker: keep waiting (the iterator state is unchanged)
                continue
            batch = self._receive(batch)
            self.loaded += len(batch.indices) + len(batch.errors)
            yield batch
            batch = None  # the step is done with it (it dropped its own references): take it back
            self._take_back()

    @contextmanager
    def _deaths_named(self) -> Iterator[None]:
        """torch's RuntimeError while a worker is gone (it says so only in its message) becomes
        one ``WorkerDied`` naming the step and the items; any other failure passes as it is."""
        try:
            yield
        except RuntimeError as exc:
            _drop_frame_locals(exc)
            dead = self._dead_workers()
            if dead:
                raise self._died(dead) from exc
            raise

    def _dead_workers(self) -> List[Tuple[int, Optional[int]]]:
        """(pid, exit code) of the workers that are gone while batches are still expected."""
        return [(w.pid, w.exitcode) for w in loader_workers(self._it) if not w.is_alive()]

    def _died(self, dead: List[Tuple[int, Optional[int]]]) -> WorkerDied:
        return WorkerDied(
            self.label,
            f"a loader worker process died ({WorkerDied.how(dead)}) while loading items "
            f"{self.loaded}.. of {len(self.dataset)}: "
            f"{WorkerDied.describe(dead)}",
            pids=[pid for pid, _ in dead],
            stage="load_fn",
        )

    def _receive(self, batch: LoadedBatch) -> LoadedBatch:
        """Copy a stacked batch out of its worker's ring (the slot is reused later), pinned on
        CUDA."""
        ref = batch.stacked
        if isinstance(ref, PipedBatch):
            self.piped += 1
            if self.piped == 1 and self.warn is not None:
                self.warn(
                    f"{ref.reason}: batches travel through pipes instead "
                    f"(slower, more CPU); {SHM_HELP}"
                )
            out = ref.tensor()
            return batch._replace(stacked=out.pin_memory() if self.pin else out)
        if isinstance(ref, SlabRef):
            if ref.block is not None:
                self.blocks[(ref.worker, ref.slot)] = ref.block
            block = self.blocks[(ref.worker, ref.slot)]
            if self.lend:
                self._lent = ref._replace(block=None)
                return batch._replace(stacked=lent_view(block, ref.shape, ref.dtype))
            out = torch.empty(ref.shape, dtype=ref.dtype, pin_memory=self.pin)
            out.copy_(slot_view(block, ref.shape, ref.dtype))
            check_stamp(block, ref)
            return batch._replace(stacked=out)
        if self.pin:
            return batch._replace(
                values=map_tensors(torch.Tensor.pin_memory, batch.values),
                stacked=None if batch.stacked is None else batch.stacked.pin_memory(),
            )
        return batch

    def _take_back(self) -> None:
        """End the loan of the last batch, before the next is asked for (no worker can have been
        sent a task that rewrites its slot yet).

        A CPU batch is handed to the step as a view of its ring slot: the copy out of the ring,
        and the fresh memory it needs, cost as much as the model's own share of a small batch
        (about 1 and 2 ms a batch of eight 224x224 images, against 9 ms of model). A step may keep
        the tensors (in its notes, say): then the slot's block is retired, left to those tensors,
        and its worker takes a new one; the rest of the run copies out instead, so kept tensors
        never pile up in ``/dev/shm``.
        """
        ref, self._lent = self._lent, None
        if ref is None:
            return
        key = (ref.worker, ref.slot)
        block = self.blocks[key]
        check_stamp(block, ref)
        if storage_refs(block):  # something besides this ring's own handle holds it
            retired(block)[0] = 1
            del self.blocks[key]
            self.lend = False

    def lower(self, by: int) -> None:
        """Lower the workers' priority by ``by`` nice levels (see ``priority.py``)."""
        renice([w.pid for w in loader_workers(self._it) if w.is_alive()], by, whole_processes=True)

    def in_flight(self) -> Optional[int]:
        """Batches requested from workers but not yet consumed (DataLoader keeps this privately)."""
        return tasks_outstanding(self._it)

    def close(self) -> None:
        """Stop and join the workers now (not at garbage collection: a failed op may keep the
        iterator alive)."""
        if tasks_outstanding(self._it):
            # closed with batches still loading (the step failed or was interrupted): a worker stuck
            # in load_fn would hold torch's shutdown for 5 s per worker; nothing it loads is needed
            forget_worker_pids(self._it)
            for worker in loader_workers(self._it):
                if worker.is_alive():
                    worker.terminate()
        shutdown_workers(self._it)
        self._it = None
        self.blocks.clear()
        held = self.loader.dataset
        if isinstance(held, ItemDataset):  # num_workers=0: its I/O threads are this process's
            close_io_pool(held)
