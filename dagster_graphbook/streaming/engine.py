"""The streaming engine: the steps of a segment pass notes to each other in one process.

Graphbook's ``Graph.run()`` pushes each output depth-first through all children (per pin, per
note, per child, recursively) before asking the source for the next note. Here the same order
comes from an explicit stack of (step, note) deliveries; a batch step collects delivered notes in
an inbox and runs once it holds ``queue_items`` items. A source is asked for its next yield only
when the stack is empty and no batch step is full (backpressure: a slow consumer holds the source
back); once the sources are exhausted, partial batches are flushed, upstream first. So what is in
memory at once is bounded by ``queue_items`` per batch step and one source yield, not by the
number of notes. A batch step runs over each chunk with the batch driver (loader pool, device,
dump pool), started afresh per chunk.
"""

from __future__ import annotations

import time
import traceback
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from ..authoring.log import LogTarget, log_target
from ..execution.errors import ItemError, StepFailure, short_repr
from ..execution.routing import Pins, normalize_yield
from .interrupts import interrupt_latch

Emit = Callable[[str, str], None]
DEFAULT_QUEUE_ITEMS = 64  # items a batch step collects before it runs (and the source waits)


@dataclass
class StreamStep:
    """One step of a segment, with its live instance and where its pins lead."""

    node_id: str
    name: str
    label: str
    kind: str  # source | step | batch
    step: Any
    pins: Tuple[str, ...]
    children: Dict[str, List[str]]  # pin -> node ids of the steps it feeds, in edge order
    stored: Set[str] = field(default_factory=set)  # pins whose notes are kept for the IO manager
    on_item_error: str = "raise"
    batch_settings: Any = None


@dataclass
class StreamStats:
    """What one step did in the stream."""

    notes_in: int = 0
    pins: Dict[str, int] = field(default_factory=dict)  # notes sent per pin
    errors: List[ItemError] = field(default_factory=list)
    files: List[Tuple[str, int]] = field(default_factory=list)
    batch: Dict[str, float] = field(default_factory=dict)  # summed figures of the batch driver
    seconds: float = 0.0


class Inlet:
    """Notes another op stored, sent into the stream one at a time as a source's yields are."""

    run_failed = False

    def __init__(self, notes: Sequence[Any]):
        self.notes = notes

    def on_start(self) -> None:
        """Nothing to set up: the notes were loaded with the op's inputs."""

    def on_end(self) -> None:
        """Nothing to release."""


class _Node:
    def __init__(self, spec: StreamStep, emit: Emit):
        self.spec = spec
        self.inbox: Deque[Any] = deque()
        self.inbox_items = 0  # batch steps: items of the notes waiting
        self.kept: Dict[str, List[Any]] = {p: [] for p in spec.stored}
        self.stats = StreamStats(pins=dict.fromkeys(spec.pins, 0))
        self.source: Optional[Iterator[Any]] = None
        self.exhausted = spec.kind != "source"
        self.log = LogTarget(spec.node_id, spec.name, emit)


def _count_items(note: Any, item_key: Any) -> int:
    """Items a note brings to a batch step (bad notes count 1: the driver reports them)."""
    get = getattr(note, "get", None)
    value = get(item_key, None) if get is not None else None
    if isinstance(value, list):
        return len(value)
    if type(value).__name__ == "Tensor":
        return len(value)
    return 1


class StreamingRun:
    """Runs the steps of one segment, in topological order, as one stream."""

    def __init__(
        self,
        steps: Sequence[StreamStep],
        emit: Emit,
        *,
        queue_items: int = DEFAULT_QUEUE_ITEMS,
        progress_interval_s: float = 5.0,
    ):
        if queue_items < 1:
            raise ValueError(f"queue_items must be at least 1, got {queue_items}")
        self.emit = emit
        self.queue_items = queue_items
        self.progress_interval_s = progress_interval_s
        self.nodes = {s.node_id: _Node(s, emit) for s in steps}
        self.order = [s.node_id for s in steps]
        self.stack: List[Tuple[str, Any]] = []  # deliveries still to make, next on top
        self.queued = 0  # notes waiting: on the stack and in batch inboxes
        self.max_queued = 0
        self._last_report = time.perf_counter()
        self._turn = 0  # the source asked next

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> Dict[str, _Node]:
        """on_start for all steps, the stream, on_end for all steps (also after a failure)."""
        started: List[_Node] = []
        failed = True
        try:
            for node_id in self.order:
                node = self.nodes[node_id]
                with log_target(node.log):
                    _hook(node.spec, "on_start")
                started.append(node)
            for node in started:
                if node.spec.kind == "source":
                    node.source = self._source_iter(node)
            with interrupt_latch() as check_interrupt:
                self._loop(check_interrupt)
            failed = False
        finally:
            self._end(started, failed)
        self.report(final=True)
        return self.nodes

    def _loop(self, check_interrupt: Callable[[], None]) -> None:
        while True:
            check_interrupt()  # a terminate that landed where Python ignores exceptions
            if self.stack:
                node_id, note = self.stack.pop()
                node = self.nodes[node_id]
                node.inbox.append(note)
                if node.spec.kind == "batch":
                    node.inbox_items += _count_items(
                        note, getattr(node.spec.step, "item_key", None)
                    )
                if node.spec.kind != "batch" or node.inbox_items >= self.queue_items:
                    self._serve(node)
            elif not self._pull_source():
                pending = next((self.nodes[i] for i in self.order if self.nodes[i].inbox), None)
                if pending is None:
                    return
                self._serve(pending)  # sources done: partial batches, upstream first
            self.report()

    def _pull_source(self) -> bool:
        """One yield from the next source, in turn as Graphbook's passes ask each source once;
        False when all are exhausted."""
        sources = [i for i in self.order if self.nodes[i].spec.kind == "source"]
        start = self._turn
        for k in range(len(sources)):
            node = self.nodes[sources[(start + k) % len(sources)]]
            if node.exhausted:
                continue
            self._turn = (start + k + 1) % len(sources)
            try:
                value = next(node.source)  # type: ignore[arg-type]
            except StopIteration:
                node.exhausted = True
                continue
            self._deliver(node, value)
            return True
        return False

    def _source_iter(self, node: _Node) -> Iterator[Any]:
        spec = node.spec
        if isinstance(spec.step, Inlet):
            for note in spec.step.notes:
                yield {"out": [note]}
            return
        warned = [False]
        warn = lambda msg: self.emit("warning", f"{spec.label}: {msg}")  # noqa: E731
        generator = "GeneratorSourceStep" in {c.__name__ for c in type(spec.step).__mro__}
        produced = 0
        values: Iterator[Any] = iter(spec.step.generator) if generator else iter([None])
        while True:
            try:
                with log_target(node.log):
                    value = next(values)
                    if not generator:
                        value = spec.step.load()
            except StopIteration:
                return
            except StepFailure:
                raise
            except Exception as exc:
                error = ItemError("load", produced, None, "", "", traceback.format_exc())
                raise StepFailure(
                    spec.label,
                    f"load failed after {produced} notes: {type(exc).__name__}: {exc}",
                    error,
                ) from exc
            routed = normalize_yield(value, spec.pins, warn, warned)
            produced += sum(len(v) for v in routed.values())
            yield routed

    # -- serving a step --------------------------------------------------------------------------
    def _serve(self, node: _Node) -> None:
        start = time.perf_counter()
        with log_target(node.log):
            if node.spec.kind == "batch":
                self._serve_batch(node)
            else:
                self._serve_note(node)
        node.stats.seconds += time.perf_counter() - start

    def _take(self, node: _Node) -> Any:
        note = node.inbox.popleft()
        self.queued -= 1
        return note

    def _serve_note(self, node: _Node) -> None:
        spec, index = node.spec, node.stats.notes_in
        note = self._take(node)
        node.stats.notes_in += 1
        try:
            routed = spec.step(note)
        except Exception as exc:
            error = ItemError("step", index, None, "", short_repr(note), traceback.format_exc())
            if spec.on_item_error != "skip":
                raise StepFailure(
                    spec.label,
                    f"failed on note {index} {short_repr(note)}: {type(exc).__name__}: {exc}",
                    error,
                ) from exc
            node.stats.errors.append(error)
            return
        out = Pins(spec.pins, spec.label)
        out.add_routed(routed, note, f"note {index}")
        self._deliver(node, out.notes)

    def _serve_batch(self, node: _Node) -> None:
        from ..execution.batch import BatchSettings, run_batch_step

        spec, offset = node.spec, node.stats.notes_in
        chunk, items = [], 0
        while node.inbox and (not chunk or items < self.queue_items):
            note = self._take(node)
            n = _count_items(note, getattr(spec.step, "item_key", None))
            node.inbox_items -= n
            items += n
            chunk.append(note)
        node.stats.notes_in += len(chunk)
        settings = spec.batch_settings or BatchSettings(on_item_error=spec.on_item_error)
        quiet = lambda level, msg: self.emit(level, msg) if level != "info" else None  # noqa: E731
        try:
            result = run_batch_step(
                spec.step,
                chunk,
                settings,
                pins=spec.pins,
                label=spec.label,
                node=(spec.node_id, spec.name),
                emit=quiet,
            )
        except StepFailure as exc:
            where = f"notes {offset}..{offset + len(chunk) - 1} of its stream"
            message = str(exc).split(": ", 1)[-1] if str(exc).startswith(spec.label) else str(exc)
            raise StepFailure(
                spec.label,
                f"{message.splitlines()[0]} [note numbers count from the chunk of {where}]",
                exc.error,
            ) from exc
        node.stats.errors += [replace(e, note_index=e.note_index + offset) for e in result.errors]
        node.stats.files += result.files
        for key, value in result.stats.items():
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and key != "num_workers"
            ):
                node.stats.batch[key] = node.stats.batch.get(key, 0) + value
        node.stats.batch["chunks"] = node.stats.batch.get("chunks", 0) + 1
        self._deliver(node, result.outputs)

    def _deliver(self, node: _Node, outputs: Dict[str, List[Any]]) -> None:
        """Notes leaving ``node``: counted, kept where the pin is stored, and put on the stack in
        Graphbook's order (per pin, per note, per child) so the first delivery is made first."""
        tasks: List[Tuple[str, Any]] = []
        for pin, notes in outputs.items():
            if not notes:
                continue
            node.stats.pins[pin] = node.stats.pins.get(pin, 0) + len(notes)
            if pin in node.kept:
                node.kept[pin].extend(notes)
            children = node.spec.children.get(pin, ())
            tasks += [(child_id, note) for note in notes for child_id in children]
        self.stack.extend(reversed(tasks))
        self.queued += len(tasks)
        self.max_queued = max(self.max_queued, self.queued)

    # -- end and progress ------------------------------------------------------------------------
    def _end(self, started: List[_Node], failed: bool) -> None:
        first: Optional[BaseException] = None
        for node in started:
            node.spec.step.run_failed = failed
            try:
                with log_target(node.log):
                    _hook(node.spec, "on_end")
            except StepFailure as exc:
                if failed:
                    self.emit("error", str(exc))
                elif first is None:
                    first = exc
        if first is not None:
            raise first

    def report(self, final: bool = False) -> None:
        """A progress line per step: notes in, notes out per pin, notes waiting."""
        now = time.perf_counter()
        if not final and now - self._last_report < self.progress_interval_s:
            return
        self._last_report = now
        for node_id in self.order:
            node = self.nodes[node_id]
            pins = ", ".join(f"{p} {n}" for p, n in node.stats.pins.items())
            state = "done" if final else f"{len(node.inbox)} waiting"
            self.emit(
                "info", f"{node.spec.label}: notes in {node.stats.notes_in}, out: {pins}; {state}"
            )


def _hook(spec: StreamStep, hook: str) -> None:
    try:
        getattr(spec.step, hook)()
    except Exception as exc:
        error = ItemError(hook, -1, None, "", "", traceback.format_exc())
        raise StepFailure(spec.label, f"{hook} failed: {type(exc).__name__}: {exc}", error) from exc
