"""The step driver: Graphbook's lifecycle of one step, the same in the default mode and a stream.

``on_start`` -> per note ``on_data`` -> ``on_item`` -> ``on_after_item`` -> ``route`` (what
``Step.__call__`` does) -> ``on_end``, which runs also when the step failed. Before ``on_end``
the driver sets ``step.run_failed`` so a step that commits output at the end (``DumpJSONL``)
can keep the previous output instead of replacing it with a partial one.

The default mode feeds a step all its notes at once (``run_step``); the stream scheduler feeds
them as they come and pulls a source one yield at a time. Either way the hooks, the handling of
bad notes, the step's limits (``max_skipped_fraction`` over the whole step) and the stall
watchdog are this module's.
"""

from __future__ import annotations

import functools
import time
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast

from ...authoring.log import Emit, LogTarget, log_target
from ...errors import Label
from ...plan.settings import BatchRuntime, StepRuntime, runtime_class
from ..batch.run import count_items, run_batch_step
from ..errors import ItemError, StepFailure, named_url, short_repr, skip_or_raise, url_named
from ..incremental.reuse import Reuse
from ..pools.batch_pools import BatchPools
from ..routing import Pins, StepResult, dropped_stats, normalize_yield
from ..stall import StallWatchdog


class _Where:
    """Where a source or plain step is, for the stall watchdog: each move counts as progress.

    ``where`` may be a function: a note's repr (a list of tensors) is then made only when the
    watchdog reports, not for every note."""

    def __init__(self, where: str, watchdog: StallWatchdog):
        self.where: Union[str, Callable[[], str]] = where
        self.watchdog = watchdog

    def set(self, where: Union[str, Callable[[], str]]) -> None:
        self.where = where
        self.watchdog.touch()

    def text(self) -> str:
        return self.where() if callable(self.where) else self.where


def _feeding(index: int, note: Any) -> str:
    return f"note {index} {short_repr(note)} (on_data, on_item, route)"


class StepDriver:
    """One step's lifecycle: ``start``, then ``feed`` notes or pull ``source()`` yields as often
    as the caller wants, then ``check`` (the whole step's limits) and ``end``.

    ``chunked``: the notes come in chunks of a stream, so a batch run's failure says which chunk
    and its per-chunk progress lines stay out of the log (the stream reports per step).
    ``first_note``: a shard's first note's number in the whole step, so that errors and messages
    number notes as the unsharded step does. ``reuse``: an incremental step's outputs of earlier
    runs; only the notes it holds none for are computed (incremental/reuse.py).
    """

    def __init__(
        self,
        step: Any,
        kind: str,
        runtime: Optional[StepRuntime] = None,
        *,
        pins: Sequence[str],
        label: Label,
        node: Tuple[str, str],
        emit: Emit,
        chunked: bool = False,
        first_note: int = 0,
        reuse: Optional[Reuse] = None,
    ):
        self.step, self.kind, self.pins, self.label, self.node = step, kind, list(pins), label, node
        self.runtime = runtime if runtime is not None else runtime_class(kind)()
        self.emit, self.chunked = emit, chunked
        self.first_note = first_note  # a shard: the step's number of its first note
        self.reuse = reuse if kind != "source" else None  # incremental: a source always runs
        self.log = LogTarget(node[0], node[1], emit)
        self.watchdog = StallWatchdog(
            str(label),
            self.runtime.stall_warning_s if kind != "batch" else 0,  # batch runs have their own
            lambda: f"still in {self.at.text()}",
            lambda msg: emit("warning", msg),
            active=False,
        )
        self.at = _Where("on_start", self.watchdog)
        self.dropped: Dict[str, int] = {}  # notes routed to undeclared pins, over all feeds
        self.notes_in = 0
        self.items_in = 0  # batch steps: items of the notes fed
        self.produced = 0  # sources: notes yielded
        self.errors: List[ItemError] = []  # skipped notes and items, note numbers of the step
        self.files: List[Tuple[str, int]] = []
        self.batch: Dict[str, float] = {}  # summed figures of the batch runs
        self.seconds = 0.0
        # a streamed batch step's worker processes live from its first chunk to its end
        self.pools = BatchPools(keep=True) if chunked and kind == "batch" else None

    # -- lifecycle -------------------------------------------------------------------------------
    @contextmanager
    def _active(self) -> Iterator[None]:
        """The step runs its own code: its log lines go to it, and the stall watchdog counts."""
        start = time.perf_counter()
        self.watchdog.resume()
        try:
            with log_target(self.log):
                yield
        finally:
            self.watchdog.pause()
            self.seconds += time.perf_counter() - start

    def start(self) -> None:
        """``on_start``; the watchdog watches from here until ``end`` (a step whose ``on_start``
        failed is not ended: Graphbook runs ``on_end`` only after a started step)."""
        self.watchdog.__enter__()
        try:
            with self._active():
                _call_hook(self.step, "on_start", self.label)
        except BaseException:
            self.watchdog.__exit__()
            raise

    def check(self) -> None:
        """The whole step's limits, once all its notes went through (fails the step)."""
        runtime = self.runtime
        if isinstance(runtime, BatchRuntime) and self.kind == "batch":
            total = max(self.items_in, self.notes_in)
            check_skipped_share(self.label, len(self.errors), total, runtime.max_skipped_fraction)

    def end(self, failed: bool) -> None:
        """``on_end`` with ``step.run_failed`` set; after a failure its own error is only logged."""
        self.at.set("on_end")
        self.step.run_failed = failed
        try:
            with self._active():
                _call_hook(self.step, "on_end", self.label)
        except StepFailure as exc:
            if not failed:
                raise
            self.emit("error", str(exc))
        finally:
            self.watchdog.__exit__()
            if self.pools is not None:
                self.pools.close(abort=failed)
            if self.reuse is not None:
                self.reuse.finish()

    # -- notes -----------------------------------------------------------------------------------
    def source(self) -> Iterator[Dict[str, List[Any]]]:
        """The source's yields, each as ``{pin: notes}`` (a ``load()`` source yields once)."""
        generator = "GeneratorSourceStep" in {c.__name__ for c in type(self.step).__mro__}
        values: Iterator[Any] = iter(self.step.generator) if generator else iter([None])
        warned = [False]
        warn = lambda msg: self.emit("warning", f"{self.label}: {msg}")  # noqa: E731
        out = Pins(self.pins, self.label, lambda msg: self.emit("warning", msg), self.dropped)
        self.at.set("the source's load (no note yet)")
        while True:
            try:
                with self._active():
                    value = next(values)
                    if not generator:
                        value = self.step.load()
            except StopIteration:
                return
            except StepFailure:
                raise
            except Exception as exc:
                raise StepFailure(
                    self.label,
                    f"load failed after {self.produced} notes: {type(exc).__name__}: {exc}"
                    f"{named_url(exc)}",
                    ItemError(
                        "load", self.produced, None, "", "", url_named(traceback.format_exc(), exc)
                    ),
                ) from exc
            routed = out.declared(normalize_yield(value, self.pins, warn, warned), "the source")
            self.produced += sum(len(v) for v in routed.values())
            self.at.set(f"the source's generator, after {self.produced} notes")
            yield routed

    def feed(self, notes: Sequence[Any]) -> StepResult:
        """Run the step over ``notes`` (the next ones of its input) and return their notes per
        pin; skipped notes and items are kept in ``errors``, numbered within the whole step."""
        offset = self.first_note + self.notes_in
        self.notes_in += len(notes)
        if self.reuse is not None:
            result = self._feed_reusing(notes, offset, self.reuse)
        else:
            result = self._compute(notes, offset)
        self.errors += result.errors
        self.files += result.files
        return result

    def _compute(
        self, notes: Sequence[Any], offset: int, numbers: Optional[List[int]] = None
    ) -> StepResult:
        if self.kind == "batch":
            return self._feed_batch(notes, offset, numbers)
        with self._active():
            return self._feed_notes(notes, offset, numbers)

    def _feed_reusing(self, notes: Sequence[Any], offset: int, reuse: Reuse) -> StepResult:
        """An incremental step: the notes the store holds outputs for are reused, the others
        computed (numbered as in the whole step), and the outputs merged in the order a full
        run gives."""
        keys, hits = reuse.split(notes)
        todo = [i for i in range(len(notes)) if i not in hits]
        reuse.computed_notes += len(todo)
        if todo:
            result = self._compute([notes[i] for i in todo], offset, [offset + i for i in todo])
        else:
            result = StepResult({p: [] for p in self.pins})
        out = Pins(self.pins, self.label)
        fresh: Dict[str, List[int]] = {p: [] for p in self.pins}
        computed = {i: j for j, i in enumerate(todo)}
        for i in range(len(notes)):
            if i in hits:
                out.add(hits[i], f"note {offset + i}")
                continue
            j = computed[i]
            routed = result.per_note.get(j)
            if routed is None:  # failed (skip): recorded as an error, stored nowhere
                continue
            if j not in result.incomplete:
                reuse.computed(keys[i], routed, result.note_files.get(j))
            before = out.counts()
            out.add(routed, f"note {offset + i}")
            for pin, n in out.counts().items():
                fresh[pin] += range(before[pin], n)
        if self.kind == "batch":
            step_items = getattr(self.step, "item_key", None)
            hit_items = sum(count_items(notes[i], step_items) for i in hits)
            self.items_in += hit_items
            result.items_in += hit_items
        stats = {**result.stats, "notes_in": len(notes), **reuse.stats()}
        return StepResult(
            out.notes, stats, result.errors, result.files, items_in=result.items_in, fresh=fresh
        )

    def _feed_notes(
        self, notes: Sequence[Any], offset: int, numbers: Optional[List[int]] = None
    ) -> StepResult:
        start = time.perf_counter()
        out = Pins(self.pins, self.label, lambda msg: self.emit("warning", msg), self.dropped)
        errors: List[ItemError] = []
        per_note: Dict[int, Dict[str, List[Any]]] = {}
        for k, note in enumerate(notes):
            index = numbers[k] if numbers is not None else offset + k
            self.at.set(functools.partial(_feeding, index, note))
            try:
                routed = self.step(note)
            except Exception as exc:
                tb = url_named(traceback.format_exc(), exc)
                error = ItemError("step", index, None, "", short_repr(note), tb)
                skip_or_raise(
                    self.runtime.on_item_error == "skip", errors, self.label,
                    f"failed on note {index} {short_repr(note)}: {type(exc).__name__}: {exc}"
                    f"{named_url(exc)}",
                    error, note=note, batch=False, cause=exc,
                )  # fmt: skip
                continue
            per_note[k] = out.add_routed(routed, note, f"note {index}")
        stats = {
            "notes_in": len(notes),
            "notes_out": sum(out.counts().values()),
            "notes_failed": len(errors),
            "seconds": round(time.perf_counter() - start, 4),
        }
        return StepResult(out.notes, {**stats, **out.dropped_stats()}, errors, per_note=per_note)

    def _feed_batch(
        self, notes: Sequence[Any], offset: int, numbers: Optional[List[int]] = None
    ) -> StepResult:
        emit = self.emit
        if self.chunked:  # the stream reports per step; a chunk's own progress lines would flood
            emit = lambda level, msg: self.emit(level, msg) if level != "info" else None  # noqa: E731
        runtime = cast(BatchRuntime, self.runtime)  # kind "batch": read_runtime made a BatchRuntime
        start = time.perf_counter()
        try:
            with log_target(self.log):
                result = run_batch_step(
                    self.step, notes, runtime, pins=self.pins, label=self.label,
                    node=self.node, emit=emit, dropped=self.dropped, note_offset=offset,
                    pools=self.pools, note_numbers=numbers,
                )  # fmt: skip
        finally:
            self.seconds += time.perf_counter() - start
        self.items_in += result.items_in
        for key, value in result.stats.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if key == "worker_nice":  # a setting, not a count: the last chunk's
                    self.batch[key] = value
                elif key != "num_workers" and not key.startswith("notes_dropped_"):
                    self.batch[key] = self.batch.get(key, 0) + value
        self.batch["chunks"] = self.batch.get("chunks", 0) + 1
        return result

    def run_source(self) -> StepResult:
        """The default mode's source: all its yields collected per pin."""
        start = time.perf_counter()
        out = Pins(self.pins, self.label)
        for routed in self.source():
            out.add(routed, "the source")
        stats = {"notes_out": self.produced, "seconds": round(time.perf_counter() - start, 4)}
        return StepResult(out.notes, {**stats, **dropped_stats(self.dropped)})


def run_step(
    step: Any,
    kind: str,
    notes: Sequence[Any],
    *,
    pins: Sequence[str],
    label: Label,
    node: Tuple[str, str],
    emit: Emit,
    runtime: Optional[StepRuntime] = None,
) -> StepResult:
    """The default mode: run one step over all its ``notes`` (ignored for sources) at once and
    return its notes per pin."""
    driver = StepDriver(step, kind, runtime, pins=pins, label=label, node=node, emit=emit)
    return run_all(driver, notes)


def run_all(driver: StepDriver, notes: Sequence[Any]) -> StepResult:
    """The whole lifecycle over all ``notes`` at once: start, feed (or the source), check, end."""
    driver.start()
    failed = True
    try:
        result = driver.run_source() if driver.kind == "source" else driver.feed(notes)
        driver.check()
        failed = False
    finally:
        driver.end(failed)
    return result


def _call_hook(step: Any, hook: str, label: Label) -> None:
    try:
        getattr(step, hook)()
    except Exception as exc:
        raise StepFailure(
            label,
            f"{hook} failed: {type(exc).__name__}: {exc}",
            ItemError(hook, -1, None, "", "", traceback.format_exc()),
        ) from exc


def check_skipped_share(label: Label, skipped: int, total: int, limit: Optional[float]) -> None:
    """Fail the step when the share of skipped items exceeds ``limit``
    (``max_skipped_fraction``)."""
    if limit is None or total <= 0 or skipped / total <= limit:
        return
    raise StepFailure(
        label,
        f"{skipped} of {total} items ({skipped / total:.0%}) were skipped by errors, more than "
        f"runtime.max_skipped_fraction {limit:g}; see the warnings above for each item",
    )
