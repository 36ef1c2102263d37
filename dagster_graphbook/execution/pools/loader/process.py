"""The loader pool: ``load_fn`` over the items of all input notes, in batches, in input order.

Processes: ``torch.utils.data.DataLoader`` (its worker loop, index queues, ordering and
worker-death detection) over a map-style dataset with an explicit start method; same-shape
tensors of a batch travel as one block through a per-worker ring of reused shared-memory blocks
(see ``_SlabRing``). Threads: the same batches from a small thread pool, for ``load_fn``s that
release the GIL (PIL, torch). Items that fail come back as error records so the step can apply
its error policy.
"""

from __future__ import annotations

import io
import math
import multiprocessing
import multiprocessing.context
import multiprocessing.queues
import multiprocessing.util
import os
import pickle
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing.reduction import ForkingPickler
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Type,
)

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler, get_worker_info

from ....errors import Label
from ....plan.settings import BatchRuntime
from ....store.tensors import map_tensors
from ...errors import WorkerDied, cuda_fork_hint, exit_hint, url_named
from ..io_calls import close_pool, map_calls, on_urls, own_pool
from ..threads import pool_thread_ids
from ..torch_internals import (
    BatchNotReady,
    forget_worker_pids,
    keep_out_sigchld_handler,
    loader_workers,
    new_shared_storage,
    shutdown_workers,
    storage_refs,
    tasks_outstanding,
    wait_in_slices,
)
from ..workers import SHM_DIR, PoolNice, init_worker, renice, shm_free_bytes


class LoadedBatch(NamedTuple):
    """One batch as it leaves the pool: same-shape tensors travel as one stacked block."""

    indices: List[int]  # item indices that loaded, in order
    values: Optional[List[Any]]  # loaded values, or None when stacked
    stacked: Optional[torch.Tensor]  # [len(indices), ...] when every value was a same-shape tensor
    errors: List[Tuple[int, str]]  # (item index, traceback) for items whose load_fn raised

    def outputs(self, device: str = "cpu") -> List[Any]:
        """The loaded values as a list, on ``device`` (a stacked block crosses to the GPU in one
        copy)."""
        if self.stacked is not None:
            block = self.stacked if device == "cpu" else self.stacked.to(device, non_blocking=True)
            return list(block.unbind(0))
        if device == "cpu":
            return list(self.values or [])
        from ...device import move

        return move(list(self.values or []), device, non_blocking=True)


class ItemDataset(Dataset):
    """Item ``i`` is ``load_fn(items[i], **params)``, or the traceback if it raised."""

    def __init__(self, items: Sequence[Any], load_fn: Callable[..., Any], params: Dict[str, Any]):
        self.items = items
        self.load_fn = load_fn
        self.params = params
        self._sent_params: Optional[bytes] = None  # the bytes ``params`` came from (``_Sent``)

    def __len__(self) -> int:
        return len(self.items)

    call_timeout_s: Optional[float] = None  # runtime.call_timeout_s (see call_timeout.py)
    # items on bucket URLs loaded this many at a time (io_calls.py): this worker's share of
    # runtime.io_concurrency, on ``io_pool`` (a loader's own threads in the step process) or the
    # worker process's I/O threads
    io_threads: int = 1
    io_pool: Optional[ThreadPoolExecutor] = None

    def __getitems__(self, keys: List[Any]) -> List[Tuple[int, Any, Optional[str]]]:
        """A batch's items (DataLoader's fetcher and ``_load_range`` call this): on bucket URLs,
        ``io_threads`` at a time; else one after another. Under ``call_timeout_s`` one after
        another: the limit needs the worker's main thread (``call_timeout.py``)."""
        threads = self.io_threads if self.call_timeout_s is None else 1
        if threads > 1 and any(self._on_url(key) for key in keys):
            return map_calls(self.__getitem__, keys, threads, self.io_pool)
        return [self[key] for key in keys]

    def _on_url(self, key: Any) -> bool:
        return key.on_url if isinstance(key, _Sent) else on_urls((self.items[key],))

    def __getitem__(self, key: Any) -> Tuple[int, Any, Optional[str]]:
        """``key``: an item's index, or a ``_Sent`` item (a stream's later chunks, which the
        workers were not forked with; see ``ProcessLoader.aim``)."""
        from ..call_timeout import time_limit

        i = key.i if isinstance(key, _Sent) else key
        try:
            if isinstance(key, _Sent):
                item, params = pickle.loads(key.item), self._params_of(key)
            else:
                item, params = self.items[key], self.params
            with time_limit(self.call_timeout_s, f"load_fn on item {i}"):
                return i, self.load_fn(item, **params), None
        except (Exception, SystemExit) as exc:  # sys.exit() in load_fn is this item's error too
            tb = url_named(traceback.format_exc(), exc)  # a bucket's error may not name the URL
            return i, None, tb + exit_hint(exc, "load_fn") + cuda_fork_hint(exc)

    def _params_of(self, key: _Sent) -> Dict[str, Any]:
        """The chunk's ``load_fn_params`` (unpickled once per chunk in each worker: each task
        arrives with its own copy of the bytes, so they are compared by value)."""
        if key.params != self._sent_params:
            self._sent_params, self.params = key.params, pickle.loads(key.params)
        return self.params


class _Sent(NamedTuple):
    """An item sent with its task, pickled in the step process: by value (tensors included,
    subclasses and all, never moved to ``/dev/shm``), and known to pickle before it is sent."""

    i: int  # the item's index in the chunk
    item: bytes
    params: bytes  # the chunk's load_fn_params, the same bytes object for the whole chunk
    on_url: bool = False  # the item is a bucket URL (``io_calls.on_urls``)


def _sent(dataset: ItemDataset) -> List[_Sent]:
    """``dataset``'s items pickled for the kept workers (raises when one does not pickle)."""
    params = _by_value(dataset.params)
    return [
        _Sent(i, _by_value(item), params, on_urls((item,))) for i, item in enumerate(dataset.items)
    ]


def _by_value(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _TensorsSaved(buffer, pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


class _TensorsSaved(pickle.Pickler):
    """Pickles tensors with ``torch.save``: by value, subclasses and layouts kept, any dtype
    (torch's plain pickling cannot load float8 or uint16 tensors back)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            return _saved_tensor, (buffer.getvalue(),)
        return NotImplemented


def _saved_tensor(data: bytes) -> torch.Tensor:
    # bytes the step process made (``_TensorsSaved``): subclasses need the full unpickler
    return torch.load(io.BytesIO(data), weights_only=False)


def _split(
    samples: List[Tuple[int, Any, Optional[str]]],
) -> Tuple[List[int], List[Any], List[Tuple[int, str]]]:
    indices = [i for i, _, err in samples if err is None]
    values = [v for _, v, err in samples if err is None]
    errors = [(i, err) for i, _, err in samples if err is not None]
    return indices, values, errors


def _stackable(values: List[Any]) -> bool:
    if len(values) < 2 or not all(isinstance(v, torch.Tensor) for v in values):
        return False
    first = values[0]
    return first.layout == torch.strided and all(
        v.shape == first.shape and v.dtype == first.dtype and v.device == first.device
        for v in values
    )


def collate(samples: List[Tuple[int, Any, Optional[str]]]) -> LoadedBatch:
    """Keep lists (Graphbook hands ``outputs`` as a list); stack same-shape tensors into one
    block."""
    indices, values, errors = _split(samples)
    if _stackable(values):
        return LoadedBatch(indices, None, torch.stack(values), errors)
    return LoadedBatch(indices, values, None, errors)


class SlabRef(NamedTuple):
    """Where a worker wrote a stacked batch: slot ``slot`` of worker ``worker``'s ring."""

    worker: int
    slot: int
    seq: int  # the worker's batch number, stamped into the block's header before the data
    block: Optional[torch.Tensor]  # the shared block itself, sent only when the slot gets a new one
    shape: Tuple[int, ...]
    dtype: torch.dtype


# bytes before the data: the int64 batch number, the int64 "retired" flag, then padding that keeps
# the data aligned
_HEADER = 64


def _nbytes(shape: Tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _view(block: torch.Tensor, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return block[_HEADER : _HEADER + _nbytes(shape, dtype)].view(dtype).view(shape)


def _lent_view(block: torch.Tensor, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The batch in ``block``, on a storage of its own that holds the block through a numpy view.

    A plain view would share the block's storage: a step that pickles it to another process
    (a ``torch.multiprocessing`` queue) would send the ring's block itself, which the worker
    rewrites later. This storage is not shared memory, so torch's reducer moves it into new shared
    memory first (a copy), and the step's own tensors follow it off the block.
    """
    if math.prod(shape) == 0:  # frombuffer refuses a count of 0; nothing to lend
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(
        block.numpy(), dtype=dtype, offset=_HEADER, count=math.prod(shape)
    ).view(shape)


def _stamp(block: torch.Tensor) -> torch.Tensor:
    return block[:8].view(torch.int64)


def _retired(block: torch.Tensor) -> torch.Tensor:
    """Set by the step process when a lent batch outlived its step call: the worker must not write
    into the block again (it takes a new one for the slot)."""
    return block[8:16].view(torch.int64)


class _SlabRing:
    """A DataLoader worker's ring of shared-memory blocks that stacked batches are written into.

    Why not torch's own tensor passing: it puts every batch into a new shared-memory file and
    passes its descriptor through multiprocessing's resource sharer (a connection per tensor).
    Measured on a 2-core machine for one 8x3x224x224 float batch: about 7 ms of worker CPU and
    2 ms in the step process, against 1 ms here (write into a block already mapped on both sides,
    send its slot number; the step is lent the slot on the CPU, or copies it into pinned memory
    for a GPU): as much as loading 5 of the 8 images. A block is sent once, when its slot first
    needs it (or needs a bigger one).

    Reuse is safe because DataLoader (map-style dataset, in order) hands tasks to its workers in
    turn and sends a new one only when it gives a batch to the step: a worker is at most
    ``prefetch`` tasks ahead of the batch being consumed, so with ``prefetch + 1`` slots a slot is
    rewritten only after the step gave it back (``ProcessLoader._take_back``: before it asks for
    the next batch). Each batch stamps its number into the block before its data, and the step
    checks the stamp when it gives the slot back (or after its copy), so a slot rewritten too
    early (a DataLoader that dispatched differently) fails loudly instead of mixing batches.
    """

    def __init__(self, slots: int, budget: Optional[int] = None):
        self.slots = slots
        self.budget = budget  # bytes of /dev/shm this worker may hold (None: no limit known)
        self.blocks: List[Optional[torch.Tensor]] = [None] * slots
        self.seq = 0

    def put(self, worker: int, values: List[torch.Tensor]) -> Any:
        """A ``SlabRef``, or a ``PipedBatch`` when the ring would not fit in ``/dev/shm``."""
        shape, dtype = (len(values), *values[0].shape), values[0].dtype
        size = _HEADER + _nbytes(shape, dtype)
        if self.budget is not None and size * self.slots > self.budget:
            why = (
                f"a ring of {self.slots} blocks of {size / 2**20:.1f} MiB does not fit in the "
                f"{self.budget / 2**20:.0f} MiB of /dev/shm left to each loader worker"
            )
            return PipedBatch.of(torch.stack(values), why)
        slot = self.seq % self.slots
        block, new = self.blocks[slot], None
        if block is None or block.numel() < size or int(_retired(block)[0]):
            try:
                block = new = _shared_block(size)
            except RuntimeError as exc:  # "unable to allocate shared memory ... No space left"
                why = f"/dev/shm is full ({str(exc).strip().splitlines()[0][:120]})"
                return PipedBatch.of(torch.stack(values), why)
            self.blocks[slot] = block
        self.seq += 1
        _stamp(block)[0] = self.seq
        with torch.no_grad():  # a load_fn's requires_grad tensors: stack(out=) refuses autograd
            torch.stack(values, out=_view(block, shape, dtype))
        return SlabRef(worker, slot, self.seq, new, shape, dtype)


def _shared_block(size: int) -> torch.Tensor:
    """``size`` bytes made in shared memory at once (``share_memory_()`` on a new tensor would
    fill private memory first and copy it over: twice the page faults), header zeroed."""
    block = torch.empty(0, dtype=torch.uint8).set_(new_shared_storage(size))
    block[:_HEADER].zero_()
    return block


class PipedBatch(NamedTuple):
    """A stacked batch sent by value through a pipe, when ``/dev/shm`` is too small for the ring
    (64 MiB by default in Docker and Kubernetes)."""

    array: Any  # its bytes as a numpy uint8 array: pickled by value, never through /dev/shm
    dtype: torch.dtype
    reason: str
    shape: Tuple[int, ...] = ()
    requires_grad: bool = False

    @classmethod
    def of(cls, block: torch.Tensor, reason: str) -> PipedBatch:
        """Any dtype numpy lacks (bfloat16, float8) travels as its bytes."""
        dense = block.detach().resolve_conj().resolve_neg().contiguous()
        data = dense.reshape(-1).view(torch.uint8).numpy()
        return cls(data, dense.dtype, reason, tuple(dense.shape), block.requires_grad)

    def tensor(self) -> torch.Tensor:
        out = torch.from_numpy(self.array).view(self.dtype).view(self.shape)
        return out.requires_grad_() if self.requires_grad else out


SHM_HELP = (
    "give the container more shared memory: `docker run --shm-size=2g`, "
    "`shm_size: 2gb` in docker compose, or on Kubernetes an "
    "`emptyDir: {medium: Memory, sizeLimit: 2Gi}` volume mounted at /dev/shm"
)


def shm_budget(num_workers: int, path: str = SHM_DIR) -> Optional[int]:
    """The bytes of ``/dev/shm`` each loader worker's ring may take: half the free space, shared."""
    free = shm_free_bytes(path)
    return None if free is None else free // 2 // max(1, num_workers)


_RING: Optional[_SlabRing] = None  # this worker process's ring (made on first use)


class _WorkerCollate:
    """The DataLoader ``collate_fn``: in a worker, stacked batches go into its ``_SlabRing``."""

    def __init__(self, slots: int, budget: Optional[int] = None):
        self.slots = slots
        self.budget = budget

    def __call__(self, samples: List[Tuple[int, Any, Optional[str]]]) -> LoadedBatch:
        global _RING
        info = get_worker_info()
        indices, values, errors = _split(samples)
        if not _stackable(values) or values[0].device.type != "cpu":
            return LoadedBatch(indices, values, None, errors)
        if info is None:  # num_workers=0: no transport at all
            return LoadedBatch(indices, None, torch.stack(values), errors)
        if _RING is None:
            _RING = _SlabRing(self.slots, self.budget)
        return LoadedBatch(indices, None, _RING.put(info.id, values), errors)


def _batches(n: int, batch_size: int) -> BatchSampler:
    """Consecutive index lists: batches cross note boundaries, order is input order."""
    return BatchSampler(SequentialSampler(range(n)), batch_size, drop_last=False)


class _Tasks:
    """The DataLoader's batch sampler: the current chunk's batches, as item indices when the
    workers were forked with its items (or load in this process), else as ``_Sent`` items."""

    def __init__(self, n: int, batch_size: int):
        self.batch_size = batch_size
        self.ranges = _batches(n, batch_size)
        self.sent: Optional[List[_Sent]] = None

    def send(self, n: int, sent: Optional[List[_Sent]]) -> None:
        self.ranges, self.sent = _batches(n, self.batch_size), sent

    def __iter__(self) -> Iterator[List[Any]]:
        sent = self.sent
        for r in self.ranges:
            yield r if sent is None else [sent[i] for i in r]

    def __len__(self) -> int:
        return len(self.ranges)


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


class _ResultQueue(multiprocessing.queues.Queue):
    """DataLoader's queues, made by ``_loader_context``: a worker's batch whose values do not pickle
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


def _loader_context(start_method: str) -> multiprocessing.context.BaseContext:
    """The start method's context, with queues that never drop a batch (``_ResultQueue``)."""
    return _CONTEXTS[start_method]()


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
                multiprocessing_context=_loader_context(settings.start_method),
                worker_init_fn=_WorkerInit(*node, settings.worker_nice),
                persistent_workers=keep,
            )
        # slots per worker: the batch the step holds, and the ``prefetch`` a worker can be ahead
        # (each block costs ~5 ms to make and send: about 4 images' loading)
        budget = shm_budget(num_workers) if num_workers > 0 else None  # sized from free /dev/shm
        collate_fn = _WorkerCollate(ring_slots or prefetch + 1, budget)
        self.warn = warn
        self.label = label  # names the step in a WorkerDied
        self.loaded = 0  # items of the batches handed out (the step has finished with them)
        self.piped = 0  # batches that came through the pipe fallback
        # pinning happens at the copy out of the ring (DataLoader's pin thread would copy blocks)
        self.dataset = dataset
        if num_workers == 0 and dataset.io_threads > 1:  # loads in this process: threads of its own
            dataset.io_pool = own_pool(dataset.io_threads, "load")
        self.tasks = _Tasks(len(dataset), batch_size)
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
            sent = _sent(dataset)
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
                return batch._replace(stacked=_lent_view(block, ref.shape, ref.dtype))
            out = torch.empty(ref.shape, dtype=ref.dtype, pin_memory=self.pin)
            out.copy_(_view(block, ref.shape, ref.dtype))
            _check_stamp(block, ref)
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
        _check_stamp(block, ref)
        if storage_refs(block):  # something besides this ring's own handle holds it
            _retired(block)[0] = 1
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
            _close_io_pool(held)


def _check_stamp(block: torch.Tensor, ref: SlabRef) -> None:
    """Fail loudly when a worker wrote into the slot while the step still read it."""
    if int(_stamp(block)[0]) != ref.seq:
        raise RuntimeError(
            f"internal error: loader worker {ref.worker} rewrote ring slot {ref.slot} while "
            f"batch {ref.seq} was still in the step's hands (it holds batch "
            f"{int(_stamp(block)[0])}); please report this with your torch version"
        )


class _WorkerInit:
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


def _close_io_pool(dataset: ItemDataset) -> None:
    """End the I/O threads a loader of the step process gave ``dataset`` (``io_calls``)."""
    pool, dataset.io_pool = dataset.io_pool, None
    if pool is not None:
        close_pool(pool)


def _load_range(dataset: ItemDataset, indices: List[int], stack: bool) -> LoadedBatch:
    """One batch in a loader thread. Stacking only pays off for the one copy to a GPU: on the CPU
    the values stay as loaded (no extra copy of the batch)."""
    samples = dataset.__getitems__(indices)
    if stack:
        return collate(samples)
    indices_ok, values, errors = _split(samples)
    return LoadedBatch(indices_ok, values, None, errors)


class ThreadLoader:
    """Batches loaded by a thread pool, at most ``num_workers * prefetch`` batches ahead."""

    def __init__(
        self, dataset: ItemDataset, batch_size: int, settings: BatchRuntime, stack: bool = False
    ):
        self.dataset = dataset
        self.nice = PoolNice(settings.worker_nice)
        self.stack = stack
        self.ranges = _batches(len(dataset), batch_size)
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
        _close_io_pool(self.dataset)
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
        self.ranges = _batches(len(items), batch_size)

    def __iter__(self) -> Iterator[LoadedBatch]:
        for indices in self.ranges:
            yield LoadedBatch(indices, None, None, [])

    def in_flight(self) -> int:
        return 0

    def close(self) -> None:
        pass
