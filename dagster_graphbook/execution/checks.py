"""Asset checks evaluated by the step's own op, after its outputs: one result per check, from
the figures of the run that just materialized the step (see ``plan/checks.py``)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, Mapping, Sequence

import dagster as dg

from ..plan.checks import ROW_COUNT, BoundCheck
from .errors import StepFailure


def with_checks(
    events: Iterable[Any], checks: Sequence[BoundCheck], pin_of: Mapping[str, str]
) -> Iterator[Any]:
    """Pass the op's events through, then yield one result per check, computed from the
    outputs' metadata and note counts (``pin_of``: Dagster output name -> pin)."""
    figures: Dict[str, Dict[str, Any]] = {}
    for event in events:
        if isinstance(event, dg.Output) and event.output_name in pin_of:
            values = {k: getattr(v, "value", v) for k, v in (event.metadata or {}).items()}
            rows = len(event.value) if isinstance(event.value, list) else None
            figures[pin_of[event.output_name]] = {**values, ROW_COUNT: rows}
        yield event
    failed = []
    for bound in checks:
        result = bound.evaluate(figures.get(bound.pin, {}))
        yield result
        if not result.passed and bound.check.severity == "blocking":
            failed.append((bound, result))
    if failed:
        raise _blocking_failure(failed)


def _blocking_failure(failed: Sequence[Any]) -> Exception:
    """Our headline for failed blocking checks (instead of Dagster's, raised after the op): the
    step fails, its notes stay materialized, its downstream steps do not run."""
    label = failed[0][0].label
    said = [
        f"blocking check {b.check.check_name!r} failed: {r.description.removeprefix(f'{label}: ')}"
        for b, r in failed
    ]
    return StepFailure(label, "; ".join(said), allow_retries=False)
