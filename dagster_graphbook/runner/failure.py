"""A failed run said in a few lines: each failure's headline and the user's line that raised it."""

from __future__ import annotations

import os
import re
import sysconfig
from typing import Any, List, Optional

import dagster as dg

RETURNED_EVENTS = (  # the events whose errors WorkflowRun.failure holds (`failure_message`)
    dg.DagsterEventType.STEP_FAILURE,
    dg.DagsterEventType.RESOURCE_INIT_FAILURE,
    dg.DagsterEventType.RUN_FAILURE,
)


def failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    """The errors of a failed run: its steps' failures, else what failed before any step ran
    (a refusal while a resource was built, an error of the run itself)."""
    messages: List[str] = []
    for record in instance.get_records_for_run(run_id, of_type=set(RETURNED_EVENTS)).records:
        event = record.event_log_entry.dagster_event
        if event is None:
            continue
        data = event.event_specific_data
        error = getattr(data, "error", None)
        while (
            error is not None
            and error.cause is not None
            and (error.cls_name or "").startswith("Dagster")
        ):
            error = error.cause  # Dagster wraps the step's own error
        if error is None:
            continue
        where = f"{record.event_log_entry.step_key}: " if record.event_log_entry.step_key else ""
        message = f"{where}{_headline(data) or error.message.strip()}"
        said = (error.message.strip().splitlines() or [""])[0].split(": ", 1)[-1]  # no class
        repeated = any(said in m for m in messages)
        if event.event_type != dg.DagsterEventType.RUN_FAILURE or not repeated:
            messages.append(message)
    return "\n".join(messages) or "the run failed (see the Dagster event log)"


def _headline(data: Any) -> Optional[str]:
    """A ``GraphbookError``'s headline (as the UI shows it), then where it was raised (the full
    traceback stays in the event log)."""
    failure = getattr(data, "user_failure_data", None)
    if failure is None or not failure.description:
        return None
    tail = failure.metadata.get("traceback") if failure.metadata else None
    where = raised_at(str(tail.value)) if tail else None
    return failure.description.strip() + (f"\n    at {where}" if where else "")


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


# where a frame is not the user's: the standard library, installed packages, and this package
# wherever it lives (an editable install keeps it in the checkout, not in site-packages)
_LIBRARIES = tuple(
    os.path.join(os.path.realpath(path), "")
    for path in {sysconfig.get_path(p) for p in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # dagster_graphbook/
)


def raised_at(traceback_text: str) -> Optional[str]:
    """``FILE, line N, in FUNC``: the innermost frame of the traceback in the user's code (not
    in this package, the standard library or installed packages), else the innermost."""
    frames = [m for m in map(_FRAME.match, traceback_text.splitlines()) if m]
    own = [
        m
        for m in frames
        if not m["file"].startswith("<") and not os.path.realpath(m["file"]).startswith(_LIBRARIES)
    ]
    found = (own or frames)[-1] if frames else None
    return f"{found['file']}, line {found['line']}, in {found['func']}" if found else None
