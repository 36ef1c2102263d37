"""Asset checks a workflow declares on its steps' figures, evaluated by the step's own op.

A check reads one figure of the run that just materialized the step (so the partition it judges
is the run's own): a value the step reports in ``self.dagster_metadata`` (``accuracy``), one of
the op's figures (``items_per_s``, ``seconds``, ``notes_in``, ``errors_skipped``), or the pin's
``row_count`` (its number of notes). A check only warns unless it says ``severity="blocking"``,
as Dagster's own asset checks are non-blocking unless asked; a blocking check that fails stops
the steps downstream (Dagster's ``AssetCheckSpec(blocking=True)``). A partitioned workflow's
source steps get ``SourceHasNotes`` (``empty_source``): a day that gave them no notes warns, or
fails the run.

```python
GraphbookWorkflow("workflows/nightly_shapes.json",
                  checks=[StepCheck(step="ClassifyShapes", metric="accuracy", min=0.9,
                                    severity="blocking")])
```
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence

import dagster as dg
from pydantic import Field, model_validator

from ..model.workflow import Workflow, WorkflowError
from .shards import FIGURES_NOTE
from .translator import WorkflowNames, safe_name

ROW_COUNT = "row_count"
NOTES_OUT = "notes_out"  # the step's notes on all its pins (a check's figure, not metadata)
# What a partitioned workflow's source steps are checked for (GraphbookWorkflow(empty_source=)):
# warn (default): a run whose source emitted no notes for its partition (the day's folder missing
# or empty) shows a failed warning check; blocking: it fails the run; ignore: no check.
EmptySource = Literal["warn", "blocking", "ignore"]
SOURCE_CHECK = "source_has_notes"


class StepCheck(dg.Model, dg.Resolvable):
    """A bound on one figure of a step, checked after every run of the step.

    ``severity`` is ``"warn"`` unless given, like Dagster's asset checks (non-blocking unless
    asked): a failure shows on the asset and the run goes on. ``severity="blocking"`` fails the
    step (after its notes are stored) and skips the steps below it.
    """

    step: str = Field(description="step label, class name or node id", examples=["ClassifyShapes"])
    metric: str = Field(
        description="figure to check: a key of the step's dagster_metadata, an op figure "
        "(items_per_s, seconds, notes_in, errors_skipped), row_count (notes of the pin) or "
        "notes_out (notes of all the step's pins)",
        examples=["accuracy", "row_count"],
    )
    min: Optional[float] = Field(default=None, description="lowest passing value", examples=[0.9])
    max: Optional[float] = Field(default=None, description="highest passing value")
    severity: Literal["blocking", "warn"] = Field(
        default="warn",
        description="warn (default, as Dagster's asset checks): the failure only shows on the "
        "asset; blocking: a failure fails the step and its downstream steps do not run",
        examples=["blocking"],
    )
    pin: Optional[str] = Field(
        default=None, description="output pin whose asset the check is on (default: the first)"
    )
    name: Optional[str] = Field(default=None, description="check name (default: METRIC_min_MIN)")

    @model_validator(mode="after")
    def _has_bound(self) -> StepCheck:
        if self.min is None and self.max is None:
            raise ValueError(
                f"check on step {self.step!r}, metric {self.metric!r}: give min, max or both"
            )
        return self

    @property
    def check_name(self) -> str:
        if self.name:
            return safe_name(self.name)
        bounds = [f"{k}_{v:g}" for k, v in (("min", self.min), ("max", self.max)) if v is not None]
        return safe_name("_".join([self.metric, *bounds]).replace(".", "_"))

    def describe(self) -> str:
        bounds = [
            f">= {self.min:g}" if self.min is not None else "",
            f"<= {self.max:g}" if self.max is not None else "",
        ]
        return f"{self.metric} {' and '.join(b for b in bounds if b)} ({self.severity})"


class BoundCheck:
    """A `StepCheck` attached to one asset of one op."""

    def __init__(self, check: StepCheck, asset_key: dg.AssetKey, pin: str, label: Any):
        self.check, self.asset_key, self.pin, self.label = check, asset_key, pin, label

    def spec(self, partitions_def: Optional[dg.PartitionsDefinition]) -> dg.AssetCheckSpec:
        """Partitioned like the asset, so each evaluation is recorded on the run's partition."""
        with warnings.catch_warnings():  # partitions_def on a check spec: preview in Dagster 1.13
            warnings.simplefilter("ignore", dg.PreviewWarning)
            return dg.AssetCheckSpec(
                self.check.check_name,
                asset=self.asset_key,
                description=self.describe(),
                blocking=self.check.severity == "blocking",
                partitions_def=partitions_def,
            )

    def describe(self) -> str:
        return self.check.describe()

    def evaluate(
        self, figures: Mapping[str, Any], partition: Optional[str] = None
    ) -> dg.AssetCheckResult:
        """The check's result from the step's ``figures`` (of its pin) in the run of
        ``partition``."""
        c = self.check
        value = figures.get(c.metric)
        meta: Dict[str, Any] = {"metric": c.metric}
        if c.min is not None:
            meta["min"] = c.min
        if c.max is not None:
            meta["max"] = c.max
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            passed = (c.min is None or value >= c.min) and (c.max is None or value <= c.max)
            meta["value"] = value
            description = f"{self.label}: {c.metric} = {value:g}, expected {c.describe()}"
        elif figures.get("notes_computed") == 0 and figures.get("notes_reused"):
            # an incremental run that computed nothing: its notes are those checked before
            passed = True
            meta["notes_reused"] = figures["notes_reused"]
            description = (
                f"{self.label}: no note computed in this run ({figures['notes_reused']} reused "
                f"from earlier runs, docs/incremental.md): no new {c.metric!r} to check"
            )
        else:
            passed = False
            known = ", ".join(sorted(k for k, v in figures.items() if _is_number(v)))
            description = (
                f"{self.label}: the step reported no numeric {c.metric!r} "
                f"(its figures: {known or 'none'})"
            )
            if FIGURES_NOTE in figures:  # a sharded step that left the figure out says why
                description += f"; as a sharded step, {figures[FIGURES_NOTE]}"
        severity = dg.AssetCheckSeverity.ERROR
        if c.severity == "warn":
            severity = dg.AssetCheckSeverity.WARN
        return dg.AssetCheckResult(
            asset_key=self.asset_key,
            check_name=c.check_name,
            passed=passed,
            severity=severity,
            metadata=meta,
            description=description,
        )


class SourceHasNotes(BoundCheck):
    """On a source step of a partitioned workflow: the run's partition gave it notes at all. A
    nightly run over a day whose folder is missing or empty otherwise succeeds on nothing."""

    def __init__(
        self, severity: EmptySource, step: str, asset_key: dg.AssetKey, pin: str, label: Any
    ):
        check = StepCheck(
            step=step,
            metric=NOTES_OUT,
            min=1,
            severity="blocking" if severity == "blocking" else "warn",
            name=SOURCE_CHECK,
        )
        super().__init__(check, asset_key, pin, label)
        self.setting = severity

    def describe(self) -> str:
        return (
            "the source step emitted notes for the run's partition (a missing or empty input "
            f"for the day emits none); empty_source: {self.setting}"
        )

    def evaluate(
        self, figures: Mapping[str, Any], partition: Optional[str] = None
    ) -> dg.AssetCheckResult:
        notes = int(figures.get(NOTES_OUT) or 0)  # with_checks counts every pin's notes
        day = f"partition {partition}" if partition is not None else "this run"
        if notes:
            description = f"{self.label}: {notes} notes for {day}"
        else:
            instead = (
                "ignore to let such runs pass"
                if self.setting == "blocking"
                else "blocking to fail such runs"
            )
            description = (
                f"{self.label}: the source emitted no notes for {day}: is its input for that "
                f"day missing or empty? (empty_source: {self.setting}; {instead})"
            )
        return dg.AssetCheckResult(
            asset_key=self.asset_key,
            check_name=self.check.check_name,
            passed=notes > 0,
            severity=dg.AssetCheckSeverity.ERROR
            if self.setting == "blocking"
            else dg.AssetCheckSeverity.WARN,
            metadata={NOTES_OUT: notes},
            description=description,
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bind_checks(
    checks: Sequence[StepCheck], names: WorkflowNames, workflow: Workflow
) -> Dict[str, List[StepCheck]]:
    """Checks by node id, each step found by ``names.resolve_step``.

    Raises ``WorkflowError`` naming the workflow, the check and the steps or pins that exist.
    """
    out: Dict[str, List[StepCheck]] = {}
    problems = []
    for c in checks:
        step = names.resolve_step(c.step)
        pins = workflow.nodes[step.node_id].outputs if step is not None else []
        if step is None:
            steps = sorted(s.step for s in names.steps.values())
            problems.append(
                f"check {c.check_name!r} names step {c.step!r}, which is not in "
                f"workflow {workflow.name!r} (steps: {', '.join(steps)})"
            )
        elif c.pin is not None and c.pin not in pins:
            problems.append(
                f"check {c.check_name!r} on step {c.step!r} names pin {c.pin!r} "
                f"(its pins: {', '.join(pins)})"
            )
        else:
            out.setdefault(step.node_id, []).append(c)
    if problems:
        raise WorkflowError(workflow.source, problems)
    return out
