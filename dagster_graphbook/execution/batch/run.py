"""The batch step driver: loader pool -> ``on_item_batch`` on the device -> dump pool -> notes
released in order.

Items of all input notes are batched together (``batch_size`` is per batch, not per note). A note
leaves (``on_after_item`` then ``route``) once all its items were processed and all its dumps
finished, and notes leave in input order. Notes with no items leave too (Graphbook dropped them),
and the last partial batch is always processed (Graphbook hung on it without ``load_fn``).
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...authoring import steps as gb_steps
from ...authoring.log import Emit
from ...errors import Label
from ...plan.settings import BatchRuntime
from ...store.codec import LOST_ITEMS_KEY, compact
from ...store.previews import PICTURE_SIZE, PICTURES_SHOWN, item_picture
from ..device import contains_cuda, is_cuda_oom, memory_line, move, resolve_device
from ..errors import GpuOutOfMemory, ItemError, StepFailure, exit_hint, short_repr, skip_or_raise
from ..pools.batch_pools import BatchPools, DumpPool, Loader
from ..pools.dump_pool import with_sizes
from ..pools.priority import AutoPriority
from ..pools.workers import shm_free_bytes, start_method_problem
from ..routing import Pins, StepResult
from ..stall import StallWatchdog
from .decode import any_encoded, decode_batch, is_encoded
from .progress import Progress

_SHM_MIN = 256 * 1024  # below this, worker processes cannot count on their semaphores


def max_workers() -> int:
    """The most loader or dump workers a step may ask for: 8 per CPU core, at least 64."""
    return max(64, 8 * (os.cpu_count() or 1))


def _check_pool_sizes(settings: BatchRuntime, label: Label) -> None:
    """Refuse pool sizes from run config that no machine can start (``num_workers: 100000000``
    forked until the run was killed, leaving workers behind) or that mean nothing (negative)."""
    limit = max_workers()
    for name in ("num_workers", "dump_workers"):
        value = getattr(settings, name)
        if value is not None and not 0 <= value <= limit:
            raise StepFailure(
                label,
                f"runtime.{name} must be between 0 and {limit} (8 per CPU core, at least 64), "
                f"got {value}",
            )


def _placeholders() -> Tuple[set, set]:
    loads, dumps = {gb_steps.BatchStep.load_fn}, {gb_steps.BatchStep.dump_fn}
    try:  # real Graphbook's placeholders, where it is installed
        from ...authoring.compat import real_graphbook_installed

        if real_graphbook_installed():  # pragma: no cover
            from graphbook.core.steps import BatchStep

            loads.add(BatchStep.load_fn)
            dumps.add(BatchStep.dump_fn)
    except ImportError:  # pragma: no cover
        pass
    return loads, dumps


def count_items(note: Any, item_key: Any) -> int:
    """Items a note brings to a batch step, without splitting it (a bad note counts 1: the batch
    run reports it)."""
    get = getattr(note, "get", None)
    value = get(item_key, None) if get is not None else None
    if isinstance(value, list) or (value is not None and type(value).__name__ == "Tensor"):
        return len(value)
    return 1


def _items_of(note: Any, item_key: str) -> List[Any]:
    """The items of a note: a list, a tensor split on dim 0, or one scalar item."""
    get = getattr(note, "get", None)
    if get is None:
        raise TypeError(f"batch steps take dict-like notes, got {type(note).__name__}")
    value = get(item_key, None)
    if value is None:
        raise KeyError(
            f"item_key {item_key!r} not found in note (keys: "
            f"{', '.join(map(str, list(note.keys())[:10]))})"
        )
    if isinstance(value, list):
        return value
    if type(value).__name__ == "Tensor":
        return [value[i] for i in range(len(value))]
    return [value]


def _dump_calls(dumps: Any, n: int, label: Label) -> List[Tuple[int, Tuple[Any, ...]]]:
    """``(position in batch, dump_fn args)`` for what ``on_item_batch`` returned."""
    if dumps is None:
        return []
    if isinstance(dumps, dict):  # Graphbook's deprecated form: {key: [one per item]}
        warnings.warn(  # noqa: B028 (the default level points at this line, which says where)
            "dict returns from on_item_batch are deprecated: return one dump_fn "
            "argument tuple per item",
            DeprecationWarning,
        )
        calls = []
        for key, values in dumps.items():
            if len(values) != n:
                raise StepFailure(
                    label,
                    f"on_item_batch returned {len(values)} values under {key!r} for a "
                    f"batch of {n} items",
                )
            calls += [(i, v if isinstance(v, tuple) else (v,)) for i, v in enumerate(values)]
        return calls
    dumps = list(dumps)
    if len(dumps) != n:
        raise StepFailure(
            label,
            f"on_item_batch returned {len(dumps)} dump tuples for a batch of {n} "
            "items; return exactly one per item (or None)",
        )
    return [(i, tuple(d) if isinstance(d, (tuple, list)) else (d,)) for i, d in enumerate(dumps)]


class _BatchRun:
    """State of one batch step run: which items and dumps each note still waits for."""

    def __init__(
        self,
        step: Any,
        notes: Sequence[Any],
        settings: BatchRuntime,
        pins: Sequence[str],
        label: Label,
        node: Tuple[str, str],
        emit: Emit,
        dropped: Optional[Dict[str, int]] = None,
        offset: int = 0,
        numbers: Optional[Sequence[int]] = None,
    ):
        self.step, self.notes, self.settings, self.label, self.node, self.emit = (
            step,
            notes,
            settings,
            label,
            node,
            emit,
        )
        self.skip = settings.on_item_error == "skip"
        self.offset = offset  # the step's number of this run's first note (a stream's chunks)
        # or the step's number of each note (an incremental step computes some of its notes)
        self.numbers = list(numbers) if numbers is not None else None
        self.per_note: Dict[int, Dict[str, List[Any]]] = {}  # each released note's outputs
        self.note_files: Dict[int, List[Tuple[str, Optional[int]]]] = {}  # its dumps' files
        self.out = Pins(pins, label, lambda msg: emit("warning", msg), dropped)
        self.errors: List[ItemError] = []
        self.files: List[Tuple[str, Optional[int]]] = []
        self.items: List[Any] = []
        self.owner: List[int] = []  # note index of each item
        self.position: List[int] = []  # index of each item inside its note
        self.waiting = [0] * len(notes)  # items not yet processed + dumps not yet done, per note
        self.valid = [True] * len(notes)
        self.stage = "start"  # what the step waits for now (the stall watchdog reports it)
        self.lost: Dict[int, List[int]] = {}  # note index -> positions of its items lost under skip
        self.released = 0

    def number(self, note_index: int) -> int:
        """The step's number of note ``note_index`` of this run (what errors and messages say)."""
        if self.numbers is not None:
            return self.numbers[note_index]
        return self.offset + note_index

    # -- what each note waits for: changed only here -------------------------------------------
    def item_done(self, index: int) -> None:
        self.waiting[self.owner[index]] -= 1

    def item_failed(self, stage: str, index: int, tb: str, progress: Progress) -> None:
        """Item ``index`` is lost: the step fails (``raise``) or the item is recorded (``skip``)."""
        progress.add("failed")
        self.fail_item(stage, index, tb)
        self.item_done(index)

    def dump_submitted(self, index: int, progress: Progress) -> None:
        self.waiting[self.owner[index]] += 1
        progress.add("dumps_submitted")

    # -- errors ----------------------------------------------------------------------------------
    def fail_item(self, stage: str, index: int, tb: str) -> None:
        note_index = self.owner[index]
        shown = not self.skip or len(self.errors) < PICTURES_SHOWN
        error = ItemError(
            stage,
            self.number(note_index),
            self.position[index],
            short_repr(self.items[index]),
            short_repr(self.notes[note_index]),
            tb,
            item_picture(self.items[index], PICTURE_SIZE) if shown else "",
        )
        skip_or_raise(
            self.skip, self.errors, self.label,
            f"{stage} failed on item {short_repr(self.items[index])} (note "
            f"{self.number(note_index)}, item {self.position[index]})",
            error, note=self.notes[note_index], batch=True,
        )  # fmt: skip
        lost = self.lost.setdefault(note_index, [])
        if self.position[index] not in lost:
            lost.append(self.position[index])

    # -- setup -----------------------------------------------------------------------------------
    def flatten(self) -> None:
        """``on_data`` for every note (Graphbook calls it at enqueue), then the item table."""
        item_key = self.step.item_key
        for ni, note in enumerate(self.notes):
            try:
                self.step.on_data(note)
                items = _items_of(note, item_key)
            except Exception as exc:
                error = ItemError(
                    "on_data", self.number(ni), None, "", short_repr(note), traceback.format_exc()
                )
                skip_or_raise(
                    self.skip, self.errors, self.label,
                    f"note {self.number(ni)} {short_repr(note)}: {type(exc).__name__}: {exc}",
                    error, note=note, batch=True, cause=exc,
                )  # fmt: skip
                self.valid[ni] = False
                continue
            self.items += items
            self.owner += [ni] * len(items)
            self.position += range(len(items))
            self.waiting[ni] = len(items)

    # -- release ---------------------------------------------------------------------------------
    def release_ready(self, progress: Progress) -> None:
        """Release finished notes from the head of the input order."""
        while self.released < len(self.notes) and self.waiting[self.released] == 0:
            ni = self.released
            self.released += 1
            if not self.valid[ni]:
                continue
            note = self.notes[ni]
            if ni in self.lost:
                mark_lost(note, self.lost[ni])
            try:
                self.step.on_after_item(note)
                routed = self.step.route(note)
            except Exception as exc:
                at = self.number(ni)
                error = ItemError("route", at, None, "", short_repr(note), traceback.format_exc())
                skip_or_raise(
                    self.skip, self.errors, self.label,
                    f"on_after_item/route failed on note {at} {short_repr(note)}: "
                    f"{type(exc).__name__}: {exc}",
                    error, note=note, batch=True, cause=exc,
                )  # fmt: skip
                continue
            self.per_note[ni] = self.out.add_routed(
                routed, note, f"route of note {self.number(ni)}"
            )
            progress.add("notes_released")

    def dump_done(self, done: Any, progress: Progress) -> None:
        index = done.key
        self.item_done(index)
        progress.add("dumps_done")
        self.files += done.files
        self.note_files.setdefault(self.owner[index], []).extend(done.files)
        if done.error:
            self.fail_item("dump_fn", index, done.error)


def mark_lost(note: Any, positions: List[int]) -> None:
    """Mark a note released with items lost under ``skip``: ``note[LOST_ITEMS_KEY]`` lists their
    positions in the note's item list, so downstream steps can tell
    (``note.get(LOST_ITEMS_KEY)``)."""
    try:
        previous = list(note.get(LOST_ITEMS_KEY) or [])
        note[LOST_ITEMS_KEY] = sorted({*previous, *positions})
    except (AttributeError, TypeError):  # a note that is not a mutable mapping keeps no mark
        pass


def _has_own(step: Any, name: str, placeholders: set) -> bool:
    """Whether the step (its class or the instance itself, as Graphbook checks) overrides
    ``name``."""
    fn = getattr(step, name, None)
    return getattr(fn, "__func__", fn) not in placeholders


def run_batch_step(
    step: Any,
    notes: Sequence[Any],
    settings: Optional[BatchRuntime] = None,
    *,
    pins: Optional[Sequence[str]] = None,
    label: Label = "batch step",
    node: Tuple[str, str] = ("?", "batch"),
    emit: Optional[Emit] = None,
    dropped: Optional[Dict[str, int]] = None,
    note_offset: int = 0,
    pools: Optional[BatchPools] = None,
    note_numbers: Optional[Sequence[int]] = None,
) -> StepResult:
    """Run a Graphbook BatchStep over ``notes`` with a loader pool and a dump pool.

    A stream calls this once per chunk of a step's notes: ``note_offset`` is the step's number of
    the chunk's first note (errors and messages count notes from the whole step), ``dropped``
    counts notes routed to undeclared pins across the calls, and ``pools`` (kept by the stream's
    driver) keeps the worker processes from one chunk to the next. ``note_numbers``: the step's
    number of each note instead (an incremental step computes only some of its notes)."""
    emit = emit or (lambda level, msg: None)
    settings = _usable_settings(settings if settings is not None else BatchRuntime(), label, emit)
    device = resolve_device(settings.device)
    if not hasattr(step, "device"):
        step.device = device  # ctx.device in on_item_batch
    batch_size = int(step.batch_size)
    if batch_size < 1:
        raise StepFailure(label, f"batch_size must be at least 1, got {batch_size}")
    pins = list(pins or getattr(step, "Outputs", ["out"]))
    run = _BatchRun(
        step, notes, settings, pins, label, node, emit, dropped, note_offset, note_numbers
    )
    run.flatten()
    has_load, has_dump = _own_fns(step, settings, label)
    pools = pools if pools is not None else BatchPools()
    loader = pools.loader(run, batch_size, device, has_load)
    dumps = pools.dump_pool(run, has_dump)
    progress = Progress(
        label, len(run.items), len(notes), device, lambda m: emit("info", m),
        settings.progress_interval_s,
    )  # fmt: skip
    watchdog = StallWatchdog(
        str(label),
        settings.stall_warning_s,
        lambda: _stuck(run, progress, dumps),
        lambda m: emit("warning", m),
    )
    priority = pools.auto_priority(settings, [loader, dumps], lambda m: emit("info", m))
    failed = True
    try:
        with watchdog:
            _batches(run, loader, dumps, progress, watchdog, priority, has_load, has_dump, device)
        failed = False
    finally:
        pools.end_run(loader, failed)
    emit("info", progress.line(0, 0))
    stats: Dict[str, Any] = {
        **progress.stats(),
        "device": device,
        "worker_type": settings.worker_type,
        "num_workers": settings.num_workers,
        # the workers' priority at the end: the run's worker_nice, else what the step chose
        "worker_nice": settings.worker_nice if settings.worker_nice >= 0 else priority.lowered,
        "items_skipped": len(run.errors),
    }
    stats.update(run.out.dropped_stats())
    files = with_sizes(run.files)  # sizes of URLs dump_fn returned: one listing per folder
    sized = dict(files)
    note_files = {
        ni: [(path, sized.get(path, size)) for path, size in written]
        for ni, written in run.note_files.items()
    }
    return StepResult(
        run.out.notes, stats, run.errors, files, items_in=len(run.items),
        per_note=run.per_note, note_files=note_files, incomplete=set(run.lost),
    )  # fmt: skip


def _usable_settings(settings: BatchRuntime, label: Label, emit: Emit) -> BatchRuntime:
    """``settings`` as this process can honour them: thread workers where no worker process can
    start (a daemonic process, a full ``/dev/shm``), each change said once."""
    _check_pool_sizes(settings, label)
    processes = settings.worker_type == "process" and settings.num_workers > 0
    if processes and multiprocessing.current_process().daemon:
        # Dask workers and Celery's prefork children are daemonic and may not have children
        emit(
            "warning",
            f"{label}: this step runs in a daemonic process "
            f"({multiprocessing.current_process().name}), which cannot start worker "
            "processes; using worker_type 'thread'",
        )
        settings = settings.model_copy(update={"worker_type": "thread"})
    shm_free = shm_free_bytes()
    if (
        settings.worker_type == "process"
        and settings.num_workers > 0
        and shm_free is not None  # None: nothing to measure
        and shm_free < _SHM_MIN
    ):
        # worker processes need /dev/shm for their semaphores: sem_open failed with ENOSPC
        emit(
            "warning",
            f"{label}: /dev/shm is full ({shm_free // 1024} KiB free), and worker processes "
            "need some for their locks; using worker_type 'thread'. Remove what leaked there "
            "(`ls -la /dev/shm`) or give the container more: `docker run --shm-size=2g`, "
            "Kubernetes: an emptyDir with medium: Memory at /dev/shm",
        )
        settings = settings.model_copy(update={"worker_type": "thread"})
    if settings.call_timeout_s and settings.worker_type == "thread":
        emit(
            "warning",
            f"{label}: runtime.call_timeout_s {settings.call_timeout_s:g} is not enforced on "
            "thread workers (a thread cannot be interrupted): a load_fn/dump_fn stuck there "
            "is only reported by the stall warnings; use worker_type 'process' for a limit",
        )
    return settings


def _own_fns(step: Any, settings: BatchRuntime, label: Label) -> Tuple[bool, bool]:
    """Whether the step has its own ``load_fn`` and ``dump_fn``; those that go to worker
    processes must be importable by the start method."""
    load_placeholders, dump_placeholders = _placeholders()
    has_load = _has_own(step, "load_fn", load_placeholders)
    has_dump = _has_own(step, "dump_fn", dump_placeholders)
    if settings.worker_type == "process" and settings.num_workers > 0:
        objects = {"load_fn": step.load_fn} if has_load else {}
        if has_dump:
            objects["dump_fn"] = step.dump_fn
        problem = start_method_problem(settings.start_method, objects)
        if problem:
            raise StepFailure(label, problem)
    return has_load, has_dump


def _batches(
    run: _BatchRun,
    loader: Loader,
    dumps: Optional[DumpPool],
    progress: Progress,
    watchdog: StallWatchdog,
    priority: AutoPriority,
    has_load: bool,
    has_dump: bool,
    device: str,
) -> None:
    """The loop: a batch from the loader, ``on_item_batch``, its dumps submitted, finished notes
    released in order; then the remaining dumps drained."""
    run.release_ready(progress)  # notes with no items leave at once (in order)
    batches = iter(loader)
    while True:
        t0, computed = time.perf_counter(), progress.on_item_batch_s
        run.stage = "load_fn"
        batch = next(batches, None)  # a dead loader worker raises WorkerDied
        progress.loader_wait_s += time.perf_counter() - t0
        watchdog.touch()
        if batch is None:
            break
        run.stage = "on_item_batch"
        progress.add("batches")
        for index, tb in batch.errors:
            run.item_failed("load_fn", index, tb, progress)
        if batch.indices:
            _process_batch(run, batch, batch.indices, has_load, has_dump, device, dumps, progress)
        batch = None  # a lent batch goes back to the loader when nothing else holds it
        if dumps is not None:
            for done in dumps.poll():
                run.dump_done(done, progress)
        run.release_ready(progress)
        priority.observe(progress.on_item_batch_s - computed, time.perf_counter() - t0)
        progress.maybe_report(loader.in_flight(), dumps.in_flight() if dumps else 0)
    if dumps is not None:
        run.stage = "dump_fn"
        for done in dumps.drain():
            run.dump_done(done, progress)
            watchdog.touch()
    run.release_ready(progress)
    if run.released != len(run.notes):  # pragma: no cover - a bug in the accounting above
        raise StepFailure(
            run.label,
            f"internal error: {len(run.notes) - run.released} notes were never released",
        )


def _stuck(run: _BatchRun, progress: Progress, dumps: Optional[DumpPool]) -> str:
    """What a stalled step waits for: the stage and the items (for the stall watchdog)."""
    done = progress.counts["processed"] + progress.counts["failed"]
    parts = [f"waiting in {run.stage}"]
    if run.stage == "load_fn" and done < len(run.items):
        parts.append(
            f"for the batch from item {done} {short_repr(run.items[done], 80)} (note "
            f"{run.number(run.owner[done])})"
        )
    pending = dumps.pending_keys() if dumps is not None else []
    if pending:
        shown = ", ".join(f"item {i} {short_repr(run.items[i], 60)}" for i in pending[:3])
        parts.append(
            f"{len(pending)} dump_fn call(s) pending: {shown}{', ...' if len(pending) > 3 else ''}"
        )
    return "; ".join(parts)


def _signature(value: Any) -> Optional[Tuple[Any, ...]]:
    if type(value).__name__ == "Tensor":
        return ("Tensor", tuple(value.shape), str(value.dtype))
    return None


def _describe(value: Any) -> str:
    sig = _signature(value)
    return (
        f"a tensor of shape {list(sig[1])} ({sig[2]})"
        if sig
        else f"{type(value).__name__} {short_repr(value, 60)}"
    )


def _odd_positions(batch: Any) -> Tuple[List[int], Optional[Tuple[Any, ...]]]:
    """Positions whose ``load_fn`` value does not match the rest of the batch: a value that is no
    tensor (None, a dict) among tensors, or a tensor of another shape than the one most items share
    (only when at least two share it: in a batch of images of many sizes no shape is odd)."""
    if batch.stacked is not None or not batch.values:
        return [], None
    sigs = [_signature(v) for v in batch.values]
    counts: Dict[Any, int] = {}
    for sig in sigs:
        if sig is not None:
            counts[sig] = counts.get(sig, 0) + 1
    if not counts:
        return [], None
    expected = max(counts, key=lambda k: counts[k])
    if counts[expected] < 2 and len(counts) > 1:
        return [pos for pos, sig in enumerate(sigs) if sig is None], expected
    return [pos for pos, sig in enumerate(sigs) if sig != expected], expected


def _drop_odd_values(
    run: _BatchRun, batch: Any, progress: Progress, odd: List[int], expected: Any, why: str
) -> Tuple[Any, List[int]]:
    """After ``on_item_batch`` failed on a batch holding odd values (``_odd_positions``), fail
    those items, named, and return the batch without them, so only they are lost."""
    for pos in odd:
        index = batch.indices[pos]
        run.item_failed(
            "load_fn",
            index,
            f"load_fn returned {_describe(batch.values[pos])} for this item, while the other "
            f"items of its batch returned {_describe_sig(expected)}; on_item_batch failed on "
            f"the batch with it: {why}\n",
            progress,
        )
    dropped = set(odd)
    keep = [pos for pos in range(len(batch.indices)) if pos not in dropped]
    indices = [batch.indices[pos] for pos in keep]
    return batch._replace(indices=indices, values=[batch.values[pos] for pos in keep]), indices


def _describe_sig(sig: Tuple[Any, ...]) -> str:
    return f"tensors of shape {list(sig[1])} ({sig[2]})"


def _decode_images(
    run: _BatchRun,
    batch: Any,
    indices: List[int],
    outputs: List[Any],
    device: str,
    progress: Progress,
) -> Tuple[Any, List[int], List[Any]]:
    """The batch's images that ``load_fn`` left encoded (``encoded_image``) decoded on
    ``device`` together; one that does not decode is lost as a file ``load_fn`` raised on is
    (``on_item_error``), and the batch goes on without it."""
    t0 = time.perf_counter()
    decoded, failures = decode_batch(outputs, device)
    progress.decode_s += time.perf_counter() - t0
    progress.images_decoded += sum(map(is_encoded, outputs)) - len(failures)
    for pos, tb in failures:
        run.item_failed("load_fn", indices[pos], tb, progress)  # raises under raise
    bad = {pos for pos, _ in failures}
    keep = [pos for pos in range(len(indices)) if pos not in bad]
    indices, values = [indices[pos] for pos in keep], [decoded[pos] for pos in keep]
    return batch._replace(indices=indices, values=values, stacked=None), indices, values


def _out_of_memory(run: _BatchRun, items: int, device: str, where: str) -> GpuOutOfMemory:
    return GpuOutOfMemory(
        run.label,
        items=items,
        batch_size=int(run.step.batch_size),
        device=device,
        memory=memory_line(device),
        where=where,
    )


def _process_batch(
    run: _BatchRun,
    batch: Any,
    indices: List[int],
    has_load: bool,
    has_dump: bool,
    device: str,
    dumps: Optional[DumpPool],
    progress: Progress,
    retried: bool = False,
) -> None:
    step = run.step
    outputs = batch.outputs(device) if has_load else None
    if outputs is not None and any_encoded(outputs):  # encoded_image: decode on the device
        try:
            batch, indices, outputs = _decode_images(run, batch, indices, outputs, device, progress)
        except Exception as exc:
            if is_cuda_oom(exc):
                raise _out_of_memory(run, len(indices), device, "decoding images") from exc
            raise
        if not indices:
            return
    items = [run.items[i] for i in indices]
    notes = [run.notes[run.owner[i]] for i in indices]
    if not retried:
        progress.add("loaded", len(indices))
    t0 = time.perf_counter()
    try:
        returned = step.on_item_batch(outputs, items, notes)
        calls = _dump_calls(returned, len(indices), run.label)
    except StepFailure:
        raise
    except (Exception, SystemExit) as exc:
        if is_cuda_oom(exc):
            raise _out_of_memory(run, len(indices), device, "on_item_batch") from exc
        tb = traceback.format_exc() + exit_hint(exc, "on_item_batch")
        odd, expected = _odd_positions(batch) if has_load else ([], None)
        if odd and not isinstance(exc, SystemExit):
            # blame the odd values, not the whole batch, and run the rest again without them
            why = f"{type(exc).__name__}: {exc}"
            batch, indices = _drop_odd_values(run, batch, progress, odd, expected, why)
            if indices:
                _process_batch(
                    run, batch, indices, has_load, has_dump, device, dumps, progress, retried=True
                )
            return
        for i in indices:
            run.item_failed("on_item_batch", i, tb, progress)  # raises under on_item_error=raise
        return
    finally:
        progress.on_item_batch_s += time.perf_counter() - t0
    if calls and not has_dump:
        raise StepFailure(
            run.label, "on_item_batch returned dump tuples but the step has no dump_fn"
        )
    for pos, args in calls:
        assert dumps is not None  # a step with a dump_fn has a pool (BatchPools.dump_pool)
        index = indices[pos]
        if contains_cuda(args):
            args = move(args, "cpu")  # dump workers must not touch CUDA
        args = compact(args)  # a view of the batch tensor would carry the whole batch across
        run.dump_submitted(index, progress)
        for done in dumps.submit(index, args):
            run.dump_done(done, progress)
    for i in indices:
        run.item_done(i)
    progress.add("processed", len(indices))
