"""The step driver: Graphbook's lifecycle over the input notes of one op.

``on_start`` -> per note ``on_data`` -> ``on_item`` -> ``on_after_item`` -> ``route`` (what
``Step.__call__`` does) -> ``on_end``, which runs also when the step failed. Before ``on_end``
the driver sets ``step.run_failed`` so a step that commits output at the end (``DumpJSONL``)
can keep the previous output instead of replacing it with a partial one.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..authoring.log import LogTarget, log_target
from .errors import ItemError, StepFailure, short_repr
from .routing import Pins, StepResult, normalize_yield
from .stall import StallWatchdog

Emit = Callable[[str, str], None]  # (level, message)


def run_step(
    step: Any,
    kind: str,
    notes: Sequence[Any],
    *,
    pins: Sequence[str],
    label: str,
    node: Tuple[str, str],
    emit: Emit,
    on_item_error: str = "raise",
    batch_settings: Any = None,
    stall_warning_s: float = 60.0,
) -> StepResult:
    """Run one step over ``notes`` (ignored for sources) and return its notes per pin.

    A source or plain step stuck in its own code (a lock, a read that never returns) says so
    every ``stall_warning_s``, naming the hook and the note; batch steps have their own watchdog.
    """
    at = _Where("on_start")
    watchdog = StallWatchdog(
        label,
        stall_warning_s if kind != "batch" else 0,
        lambda: f"still in {at.where}",
        lambda msg: emit("warning", msg),
    )
    with log_target(LogTarget(node[0], node[1], emit)), watchdog:
        at.watchdog = watchdog
        _call_hook(step, "on_start", label)
        failed = True
        try:
            if kind == "source":
                at.set("the source's load (no note yet)")
                result = _run_source(step, pins, label, emit, at)
            elif kind == "batch":
                from .batch import BatchSettings, run_batch_step

                settings = batch_settings or BatchSettings(on_item_error=on_item_error)
                result = run_batch_step(
                    step, notes, settings, pins=pins, label=label, node=node, emit=emit
                )
            else:
                result = _run_notes(step, notes, pins, label, on_item_error, emit, at)
            failed = False
        finally:
            at.set("on_end")
            step.run_failed = failed
            try:
                _call_hook(step, "on_end", label)
            except StepFailure as exc:
                if not failed:
                    raise
                emit("error", str(exc))
    return result


def _call_hook(step: Any, hook: str, label: str) -> None:
    try:
        getattr(step, hook)()
    except Exception as exc:
        raise StepFailure(
            label,
            f"{hook} failed: {type(exc).__name__}: {exc}",
            ItemError(hook, -1, None, "", "", traceback.format_exc()),
        ) from exc


class _Where:
    """Where a source or plain step is, for the stall watchdog: each move counts as progress."""

    def __init__(self, where: str):
        self.where, self.watchdog = where, None

    def set(self, where: str) -> None:
        self.where = where
        if self.watchdog is not None:
            self.watchdog.touch()


def _run_source(
    step: Any, pins: Sequence[str], label: str, emit: Emit, at: Optional[_Where] = None
) -> StepResult:
    at = at or _Where("")
    start = time.perf_counter()
    warned = [False]
    warn = lambda msg: emit("warning", f"{label}: {msg}")  # noqa: E731
    out = Pins(pins, label, lambda msg: emit("warning", msg))
    try:
        if "GeneratorSourceStep" in {c.__name__ for c in type(step).__mro__}:
            for value in step.generator:
                out.add(normalize_yield(value, pins, warn, warned), "the source")
                at.set(f"the source's generator, after {sum(out.counts().values())} notes")
        else:
            out.add(normalize_yield(step.load(), pins, warn, warned), "the source")
    except StepFailure:
        raise
    except Exception as exc:
        produced = sum(out.counts().values())
        raise StepFailure(
            label,
            f"load failed after {produced} notes: {type(exc).__name__}: {exc}",
            ItemError("load", produced, None, "", "", traceback.format_exc()),
        ) from exc
    seconds = round(time.perf_counter() - start, 4)
    stats = {"notes_out": sum(out.counts().values()), "seconds": seconds}
    return StepResult(out.notes, {**stats, **out.dropped_stats()})


def _run_notes(
    step: Any,
    notes: Sequence[Any],
    pins: Sequence[str],
    label: str,
    on_item_error: str,
    emit: Emit,
    at: Optional[_Where] = None,
) -> StepResult:
    at = at or _Where("")
    start = time.perf_counter()
    out = Pins(pins, label, lambda msg: emit("warning", msg))
    errors: List[ItemError] = []
    for index, note in enumerate(notes):
        at.set(f"note {index} {short_repr(note)} (on_data, on_item, route)")
        try:
            routed = step(note)
        except Exception as exc:
            error = ItemError("step", index, None, "", short_repr(note), traceback.format_exc())
            if on_item_error != "skip":
                raise StepFailure(
                    label,
                    f"failed on note {index} {short_repr(note)}: {type(exc).__name__}: {exc}",
                    error,
                    note=note,
                ) from exc
            errors.append(error)
            continue
        out.add(routed, f"note {index}")
    stats = {
        "notes_in": len(notes),
        "notes_out": sum(out.counts().values()),
        "notes_failed": len(errors),
        "seconds": round(time.perf_counter() - start, 4),
    }
    return StepResult(out.notes, {**stats, **out.dropped_stats()}, errors)


def step_label(workflow: str, step_name: str, node_id: str) -> str:
    return f"workflow '{workflow}', step '{step_name}' (node {node_id})"
