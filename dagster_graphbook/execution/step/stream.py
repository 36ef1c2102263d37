"""The stream scheduler: the steps of a segment pass notes to each other in one process.

Graphbook's ``Graph.run()`` pushes each output depth-first through all children (per pin, per
note, per child, recursively) before asking the source for the next note. Here the same order
comes from an explicit stack of (step, note) deliveries; a batch step collects delivered notes in
an inbox and runs once it holds ``queue_items`` items. A source is asked for its next yield only
when the stack is empty and no batch step is full (backpressure: a slow consumer holds the source
back); once the sources are exhausted, partial batches are flushed, upstream first. So what is in
memory at once is bounded by ``queue_items`` per batch step and one source yield, not by the
number of notes; nothing is kept per note once it has left, except the notes of stored pins (a
sink's), which are the asset's value and stay until the stream ends.

The scheduler only decides who runs next. Each step runs through its ``StepDriver``, the same
lifecycle as in the default mode: hooks, bad notes, limits and stall warnings are the driver's.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)

from ...authoring.log import Emit
from ...plan.settings import StreamSettings
from ..batch.run import count_items
from ..errors import StepFailure
from ..ownership.interrupts import interrupt_latch
from .driver import StepDriver


@dataclass
class StreamStep:
    """One member of a segment: a step (its driver) or an inlet (notes another op stored, sent
    into the stream one at a time as a source's yields are), and where its pins lead."""

    node_id: str
    label: str
    kind: str  # source | step | batch | inlet
    pins: Tuple[str, ...]
    children: Mapping[str, Sequence[str]]  # pin -> node ids of the steps it feeds, in edge order
    stored: Set[str] = field(default_factory=set)  # pins whose notes are kept for the IO manager
    driver: Optional[StepDriver] = None
    notes: Sequence[Any] = ()  # an inlet's

    @classmethod
    def of(
        cls, driver: StepDriver, children: Mapping[str, Sequence[str]], stored: Set[str]
    ) -> StreamStep:
        node_id = driver.node[0]
        return cls(
            node_id, str(driver.label), driver.kind, tuple(driver.pins), children, stored, driver
        )

    @classmethod
    def inlet(cls, src: str, pin: str, notes: Sequence[Any], readers: Sequence[str]) -> StreamStep:
        label = f"input {src}.{pin}"
        return cls(f"{src}:{pin}", label, "inlet", ("out",), {"out": list(readers)}, notes=notes)


# A stored pin's notes stay in memory until the stream ends (they are its asset's value); at
# this many, and at each tenfold, a warning says so: in a stream that runs on, they are what grows.
KEPT_WARN_NOTES = 100_000


class _Node:
    def __init__(self, spec: StreamStep):
        self.spec = spec
        self.inbox: Deque[Any] = deque()
        self.inbox_items = 0  # batch steps: items of the notes waiting
        self.kept: Dict[str, List[Any]] = {p: [] for p in spec.stored}
        self.kept_warn_at: Dict[str, int] = dict.fromkeys(spec.stored, KEPT_WARN_NOTES)
        self.sent: Dict[str, int] = dict.fromkeys(spec.pins, 0)  # notes sent per pin
        self.source: Optional[Iterator[Dict[str, List[Any]]]] = None
        self.exhausted = spec.kind not in ("source", "inlet")
        item_key = getattr(spec.driver.step, "item_key", None) if spec.driver else None
        self.item_key = item_key


class StreamingRun:
    """Runs the steps of one segment, in topological order, as one stream."""

    def __init__(self, steps: Sequence[StreamStep], emit: Emit, settings: StreamSettings):
        if settings.queue_items < 1:
            raise ValueError(f"queue_items must be at least 1, got {settings.queue_items}")
        self.emit, self.settings = emit, settings
        self.nodes = {s.node_id: _Node(s) for s in steps}
        self.order = [s.node_id for s in steps]
        self.stack: List[Tuple[str, Any]] = []  # deliveries still to make, next on top
        self.queued = 0  # notes waiting: on the stack and in batch inboxes
        self.max_queued = 0
        self._last_report = time.perf_counter()
        self._turn = 0  # the source asked next

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> Dict[str, _Node]:
        """Start every step, stream, check each step's limits, end every step (also after a
        failure)."""
        started: List[StepDriver] = []
        failed = True
        try:
            for node in self.nodes.values():
                if node.spec.driver is not None:
                    node.spec.driver.start()
                    started.append(node.spec.driver)
                node.source = self._source_of(node.spec)
            with interrupt_latch() as check_interrupt:
                self._loop(check_interrupt)
            for driver in started:
                driver.check()
            failed = False
        finally:
            _end(started, failed)
        self.report(final=True)
        return self.nodes

    @staticmethod
    def _source_of(spec: StreamStep) -> Optional[Iterator[Dict[str, List[Any]]]]:
        if spec.kind == "inlet":
            return ({"out": [note]} for note in spec.notes)
        if spec.kind == "source" and spec.driver is not None:
            return spec.driver.source()
        return None

    def _loop(self, check_interrupt: Callable[[], None]) -> None:
        while True:
            check_interrupt()  # a terminate that landed where Python ignores exceptions
            if self.stack:
                node_id, note = self.stack.pop()
                node = self.nodes[node_id]
                node.inbox.append(note)
                if node.spec.kind == "batch":
                    node.inbox_items += count_items(note, node.item_key)
                if node.spec.kind != "batch" or node.inbox_items >= self.settings.queue_items:
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
        sources = [i for i in self.order if self.nodes[i].source is not None]
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

    # -- serving a step --------------------------------------------------------------------------
    def _serve(self, node: _Node) -> None:
        """Hand the step its next note (a plain step) or its next chunk (a batch step)."""
        chunk: List[Any] = []
        items = 0
        while node.inbox and (not chunk or node.spec.kind == "batch"):
            if chunk and items >= self.settings.queue_items:
                break
            note = node.inbox.popleft()
            self.queued -= 1
            if node.spec.kind == "batch":
                n = count_items(note, node.item_key)
                node.inbox_items -= n
                items += n
            chunk.append(note)
        result = node.spec.driver.feed(chunk)  # type: ignore[union-attr]
        self._deliver(node, result.outputs)

    def _deliver(self, node: _Node, outputs: Mapping[str, List[Any]]) -> None:
        """Notes leaving ``node``: counted, kept where the pin is stored, and put on the stack in
        Graphbook's order (per pin, per note, per child) so the first delivery is made first."""
        tasks: List[Tuple[str, Any]] = []
        for pin, notes in outputs.items():
            if not notes:
                continue
            node.sent[pin] = node.sent.get(pin, 0) + len(notes)
            if pin in node.kept:
                node.kept[pin].extend(notes)
                self._warn_kept(node, pin)
            children = node.spec.children.get(pin, ())
            tasks += [(child_id, note) for note in notes for child_id in children]
        self.stack.extend(reversed(tasks))
        self.queued += len(tasks)
        self.max_queued = max(self.max_queued, self.queued)

    def _warn_kept(self, node: _Node, pin: str) -> None:
        held = len(node.kept[pin])
        if held < node.kept_warn_at[pin]:
            return
        node.kept_warn_at[pin] *= 10
        self.emit(
            "warning",
            f"{node.spec.label}: {held:,} notes of pin {pin!r} are held in memory: a stored pin's "
            "notes stay until the stream ends, when they are stored as its asset, so in a stream "
            "that runs on memory grows with them; a sink that stores nothing declares no output "
            "pins (Outputs = [])",
        )

    # -- progress --------------------------------------------------------------------------------
    def report(self, final: bool = False) -> None:
        """A progress line per step: notes in, notes out per pin, notes waiting."""
        now = time.perf_counter()
        if not final and now - self._last_report < self.settings.progress_interval_s:
            return
        self._last_report = now
        for node in self.nodes.values():
            if node.spec.driver is None:
                continue
            pins = ", ".join(f"{p} {n}" for p, n in node.sent.items())
            state = "done" if final else f"{len(node.inbox)} waiting"
            notes_in = node.spec.driver.notes_in
            self.emit("info", f"{node.spec.label}: notes in {notes_in}, out: {pins}; {state}")


def _end(started: List[StepDriver], failed: bool) -> None:
    """End every started step; after a success, the first ``on_end`` failure fails the op."""
    first: Optional[BaseException] = None
    for driver in started:
        try:
            driver.end(failed)
        except StepFailure as exc:
            if first is None:
                first = exc
    if first is not None:
        raise first
