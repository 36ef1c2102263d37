"""Asset checks evaluated by the step's own op, after its outputs: one result per check, from
the figures of the run that just materialized the step (see ``plan/checks.py``)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Sequence

import dagster as dg

from ...plan.checks import NOTES_OUT, ROW_COUNT, BoundCheck
from ..errors import StepFailure


def with_checks(
    events: Iterable[Any],
    checks: Sequence[BoundCheck],
    pin_of: Mapping[str, str],
    context: Optional[Any] = None,
) -> Iterator[Any]:
    """Pass the op's events through, then yield one result per check, computed from the
    outputs' metadata and note counts (``pin_of``: Dagster output name -> pin). With the op's
    ``context``, checks know the run's partition and a failed warning check is also a warning in
    the run's log (what the terminal shows)."""
    figures: Dict[str, Dict[str, Any]] = {}
    for event in events:
        if isinstance(event, dg.Output) and event.output_name in pin_of:
            values = {k: getattr(v, "value", v) for k, v in (event.metadata or {}).items()}
            rows = len(event.value) if isinstance(event.value, list) else None
            figures[pin_of[event.output_name]] = {**values, ROW_COUNT: rows}
        yield event
    if not checks:
        return
    counts = [f[ROW_COUNT] for f in figures.values()]
    notes_out = sum(counts) if all(isinstance(c, int) for c in counts) else None  # None: unknown
    partition = context.partition_key if context is not None and context.has_partition_key else None
    failed = []
    for bound in checks:
        result = bound.evaluate({**figures.get(bound.pin, {}), NOTES_OUT: notes_out}, partition)
        yield result
        if not result.passed and bound.check.severity == "blocking":
            failed.append((bound, result))
        elif not result.passed and context is not None:
            context.log.warning(f"check {bound.check.check_name!r} failed: {result.description}")
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
