"""The step driver: Graphbook's lifecycle over the input notes of one op.

``on_start`` -> per note ``on_data`` -> ``on_item`` -> ``on_after_item`` -> ``route`` (what
``Step.__call__`` does) -> ``on_end``, which runs also when the step failed. Before ``on_end``
the driver sets ``step.run_failed`` so a step that commits output at the end (``DumpJSONL``)
can keep the previous output instead of replacing it with a partial one.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable, List, Sequence, Tuple

from ..authoring.log import LogTarget, log_target
from .errors import ItemError, StepFailure, short_repr
from .routing import Pins, StepResult, normalize_yield

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
) -> StepResult:
    """Run one step over ``notes`` (ignored for sources) and return its notes per pin."""
    with log_target(LogTarget(node[0], node[1], emit)):
        _call_hook(step, "on_start", label)
        failed = True
        try:
            if kind == "source":
                result = _run_source(step, pins, label, emit)
            elif kind == "batch":
                from .batch import BatchSettings, run_batch_step

                settings = batch_settings or BatchSettings(on_item_error=on_item_error)
                result = run_batch_step(
                    step, notes, settings, pins=pins, label=label, node=node, emit=emit
                )
            else:
                result = _run_notes(step, notes, pins, label, on_item_error, emit)
            failed = False
        finally:
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


def _run_source(step: Any, pins: Sequence[str], label: str, emit: Emit) -> StepResult:
    start = time.perf_counter()
    warned = [False]
    warn = lambda msg: emit("warning", f"{label}: {msg}")  # noqa: E731
    out = Pins(pins, label, lambda msg: emit("warning", msg))
    try:
        if "GeneratorSourceStep" in {c.__name__ for c in type(step).__mro__}:
            for value in step.generator:
                out.add(normalize_yield(value, pins, warn, warned), "the source")
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
    step: Any, notes: Sequence[Any], pins: Sequence[str], label: str, on_item_error: str, emit: Emit
) -> StepResult:
    start = time.perf_counter()
    out = Pins(pins, label, lambda msg: emit("warning", msg))
    errors: List[ItemError] = []
    for index, note in enumerate(notes):
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
