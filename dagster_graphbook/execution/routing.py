"""Notes leaving a step: route results and source yields turned into pins, checked against the
step's pins."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..authoring.steps import route_to_output
from .errors import ItemError


@dataclass
class StepResult:
    """What one step run produced: notes per pin, figures, skipped errors, files written."""

    outputs: Mapping[str, List[Any]]
    stats: Dict[str, Any] = field(default_factory=dict)
    errors: List[ItemError] = field(default_factory=list)
    files: List[Tuple[str, int]] = field(default_factory=list)
    items_in: int = 0  # batch steps: the items of the notes it took
    sent: Optional[Dict[str, int]] = None  # streamed: notes sent per pin (none are kept)
    # each note's outputs per pin by its position in the feed (a note that failed has none) and
    # the files its dumps wrote: what an incremental step records (incremental/reuse.py)
    per_note: Dict[int, Dict[str, List[Any]]] = field(default_factory=dict)
    note_files: Dict[int, List[Tuple[str, Optional[int]]]] = field(default_factory=dict)
    incomplete: Set[int] = field(default_factory=set)  # notes released with items lost (skip)
    # an incremental step: the positions of each pin's notes computed in this run (not reused)
    fresh: Optional[Dict[str, List[int]]] = None


class PinNotes(list):
    """One pin's notes, with the step's node id and each note's place in the step's emission order
    across all its pins: a child fed by several pins of one step takes the notes in that order,
    as Graphbook's per-parent queue hands them out (``Split`` into one step keeps note order)."""

    def __init__(
        self, notes: Sequence[Any] = (), order: Sequence[int] = (), source: Optional[str] = None
    ):
        super().__init__(notes)
        self.order = list(order)
        self.source = source


class Pins:
    """Collects notes per output pin.

    Notes routed to a pin the step does not declare are dropped, as Graphbook drops them (nobody
    listens to that pin), but never silently: one warning per pin and a count per pin.
    """

    def __init__(
        self,
        pins: Sequence[str],
        label: Any,
        warn: Optional[Callable[[str], None]] = None,
        dropped: Optional[Dict[str, int]] = None,
    ):
        self.pins = list(pins)
        self.label = label
        self.warn = warn
        self.notes: Dict[str, PinNotes] = {p: PinNotes() for p in self.pins}
        self.dropped: Dict[str, int] = dropped if dropped is not None else {}  # shared by a step
        self._emitted = 0

    def declared(self, step_output: Dict[str, List[Any]], where: str) -> Dict[str, List[Any]]:
        """``step_output`` without the pins the step does not declare (dropped, counted)."""
        kept = {}
        for pin, notes in step_output.items():
            if pin in self.notes:
                kept[pin] = notes
            else:
                self._drop(pin, notes, where)
        return kept

    def add(self, step_output: Dict[str, List[Any]], where: str) -> Dict[str, List[Any]]:
        """Add one note's (or yield's) notes per pin; returns those kept (declared pins)."""
        kept = self.declared(step_output, where)
        for pin, notes in kept.items():
            target = self.notes[pin]
            target.extend(notes)
            target.order.extend(range(self._emitted, self._emitted + len(notes)))
            self._emitted += len(notes)
        return kept

    def _drop(self, pin: Any, notes: List[Any], where: str) -> None:
        if pin not in self.dropped and self.warn is not None:
            self.warn(
                f"{self.label}: {where} sent notes to pin {pin!r}, which the step does "
                f"not declare (its pins: {', '.join(self.pins)}); they are dropped, as in "
                f"Graphbook (count in metadata 'notes_dropped_{pin}')"
            )
        self.dropped[pin] = self.dropped.get(pin, 0) + len(notes)

    def add_routed(self, routed: Any, note: Any, where: str) -> Dict[str, List[Any]]:
        return self.add(route_to_output(routed, note), where)

    def counts(self) -> Dict[str, int]:
        return {pin: len(v) for pin, v in self.notes.items()}

    def dropped_stats(self) -> Dict[str, int]:
        """``notes_dropped_<pin>`` per undeclared pin, for the asset metadata."""
        return dropped_stats(self.dropped)


def dropped_stats(dropped: Dict[str, int]) -> Dict[str, int]:
    """``notes_dropped_<pin>`` per undeclared pin (a step's counts over all its feeds)."""
    return {f"notes_dropped_{pin}": n for pin, n in dropped.items()}


def normalize_yield(
    value: Any, pins: Sequence[str], warn: Callable[[str], None], warned: List[bool]
) -> Dict[str, List[Any]]:
    """One source yield (or ``load()`` result) as ``{pin: notes}``.

    Graphbook treats every yielded dict as ``{pin: note(s)}``, so a bare note dict such as
    ``{"name": ..., "image": ...}`` went to pins nobody listens to. Here a dict whose keys are not
    all pins is one note on the first pin, with a warning (once per step).
    """
    if isinstance(value, dict):
        if not value:
            return {}
        if all(k in pins for k in value):
            return {pin: v if isinstance(v, list) else [v] for pin, v in value.items()}
        if not warned[0]:
            warned[0] = True
            warn(
                f"yielded a dict whose keys ({', '.join(map(str, list(value)[:5]))}) "
                "are not output pins; "
                f"treating it as one note on pin {pins[0]!r}. Yield {{{pins[0]!r}: "
                f"note}} to be explicit."
            )
        return {pins[0]: [value]}
    if isinstance(value, list):
        return {pins[0]: value}
    return {pins[0]: [value]}
