"""Notes leaving a step: route results and source yields turned into pins, checked against the step's pins."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Sequence, Tuple

from ..authoring.steps import route_to_output
from .errors import ItemError, StepFailure


@dataclass
class StepResult:
    """What one step run produced: notes per pin, figures, skipped errors, files written."""

    outputs: Dict[str, List[Any]]
    stats: Dict[str, Any] = field(default_factory=dict)
    errors: List[ItemError] = field(default_factory=list)
    files: List[Tuple[str, int]] = field(default_factory=list)


class Pins:
    """Collects notes per output pin; a pin the step does not declare is an error, not a lost note."""

    def __init__(self, pins: Sequence[str], label: str):
        self.pins = list(pins)
        self.label = label
        self.notes: Dict[str, List[Any]] = {p: [] for p in self.pins}

    def add(self, step_output: Dict[str, List[Any]], where: str) -> None:
        for pin, notes in step_output.items():
            if pin not in self.notes:
                raise StepFailure(self.label, f"{where} sent notes to pin {pin!r}, which the step does not have (its pins: {', '.join(self.pins)})")
            self.notes[pin].extend(notes)

    def add_routed(self, routed: Any, note: Any, where: str) -> None:
        self.add(route_to_output(routed, note), where)

    def counts(self) -> Dict[str, int]:
        return {pin: len(v) for pin, v in self.notes.items()}


def normalize_yield(value: Any, pins: Sequence[str], warn: Callable[[str], None], warned: List[bool]) -> Dict[str, List[Any]]:
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
            warn(f"yielded a dict whose keys ({', '.join(map(str, list(value)[:5]))}) are not output pins; "
                 f"treating it as one note on pin {pins[0]!r}. Yield {{{pins[0]!r}: note}} to be explicit.")
        return {pins[0]: [value]}
    if isinstance(value, list):
        return {pins[0]: value}
    return {pins[0]: [value]}
