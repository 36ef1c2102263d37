"""How Dagster runs a workflow: every option, typed and described once.

``GraphbookWorkflow`` is a workflow source plus these options; the YAML component's schema takes
their descriptions; ``build_workflow_defs`` and the plan compiler read them whole, so a new
option is written here and read where it matters, with no signature in between to edit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Literal, Mapping, Optional, Protocol, Sequence, Union

import dagster as dg

from .checks import EmptySource, StepCheck
from .gpus import GpuSetting
from .segments import Streaming
from .shards import ShardSetting

# False (no previews), {"max": 12, "size": 96, "caption": [...]} for every step, and/or
# {step: False | {...}} per step (plan/previews.py)
PreviewSetting = Union[None, bool, Mapping[str, Any]]
# "eager" | "on_cron" | "none" | an AutomationCondition (defs/automation.py)
AutomationName = Literal["eager", "on_cron", "none"]
Automation = Union[None, AutomationName, dg.AutomationCondition]


class SensorSpec(Protocol):
    """What the definitions builder asks of a workflow's sensor (a ``FolderSensor``)."""

    asset_key: Any

    def build(
        self,
        job: Any,
        partitions_def: Optional[dg.PartitionsDefinition] = None,
        *,
        request_runs: bool = True,
        name: Optional[str] = None,
    ) -> dg.SensorDefinition: ...


def _option(default: Any = None, *, doc: str, factory: Any = None) -> Any:
    """A field with its description (``describe``), the one place an option is explained."""
    if factory is not None:
        return field(default_factory=factory, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True, kw_only=True)
class WorkflowOptions:
    """How Dagster runs a workflow (frozen: derive a variant with ``dataclasses.replace``)."""

    partitions_def: Optional[dg.PartitionsDefinition] = _option(
        doc="partitions of the workflow's assets and job; steps read the key as {partition_key}"
    )
    cron_schedule: Optional[str] = _option(
        doc="schedule <job>_schedule (UTC); partitioned: each tick runs the latest partition"
    )
    schedule_hour: Optional[int] = _option(
        doc="schedule <job>_nightly at this hour (UTC), running the previous day"
    )
    retry_policy: Optional[dg.RetryPolicy] = _option(
        doc="retry policy of every step op (else GraphbookTranslator.get_retry_policy per step)"
    )
    op_tags: Dict[str, Any] = _option(
        factory=dict,
        doc="tags on every step's op (executors read them, e.g. dagster-k8s/config)",
    )
    job_tags: Dict[str, str] = _option(factory=dict, doc="tags on the job and its runs")
    overridable_functions: Sequence[str] = _option(
        (), doc="function parameters whose code run config may replace"
    )
    external_deps: Dict[str, List[Any]] = _option(
        factory=dict,
        doc="step name or node id -> upstream asset keys outside the workflow, for lineage",
    )
    sensor: Optional[SensorSpec] = _option(
        doc="a FolderSensor: a run per new dated folder, or per change of a growing folder"
    )
    executor: Union[None, str, dg.ExecutorDefinition] = _option(
        doc="default: in one process unless a run's execution config picks multiprocess; "
        "multiprocess: one process per step by default; an ExecutorDefinition (Ray's, "
        "dagster-k8s's)"
    )
    checks: Sequence[StepCheck] = _option(
        (), doc="asset checks on steps' figures, evaluated on each run's own partition"
    )
    streaming: Streaming = _option(
        False,
        doc="true: run all steps as one op streaming notes step to step; a list of steps: "
        "those (a connected segment) as one op (docs/streaming.md)",
    )
    gpus: GpuSetting = _option(
        doc="GPUs each batch step requests (op tags for k8s, Ray, Dask), or {step: N}"
    )
    shards: ShardSetting = _option(
        doc="batch steps run as N shards, each its own Dagster step retried alone, merged by a "
        "commit step: {step: N}, {step: {shard_size: K}}, or N for every batch step "
        "(docs/sharding.md); a run's runtime.shards / shard_size change how many"
    )
    notes_dir: Optional[str] = _option(
        doc="where steps' notes are stored: a folder or any fsspec URL (default: "
        "build_definitions', else the instance's storage)"
    )
    notes_keep: Optional[int] = _option(
        doc="stored note versions kept per asset and partition (default 3)"
    )
    preview: PreviewSetting = _option(
        doc="image previews on each materialization: false for none, {max: 12, size: 96, "
        "caption: [label, confidence]} for every step, {step: false | {...}} per step "
        "(docs/ui.md)"
    )
    pool: Optional[str] = _option(
        doc="concurrency pool of every step op (default: batch steps share `gpu`); limit it "
        "with `dagster instance concurrency set <pool> N`"
    )
    automation: Automation = _option(
        doc="declarative automation instead of the schedule and the sensor's run requests: "
        "eager runs each new day once the folder sensor's asset (sensor_asset) records it; "
        "on_cron runs the latest day after the cron (cron_schedule or schedule_hour) once its "
        "inputs are present; sensor <job>_automation evaluates it"
    )
    empty_source: EmptySource = _option(
        "warn",
        doc="with partitions: what a run whose source step emits no notes (the day's folder "
        "missing or empty) gets: warn (default), a failed warning check on the source's "
        "asset and a warning in the run's log; blocking, the run fails; ignore, no check",
    )
    runtime: Optional[Mapping[str, Any]] = _option(
        doc="the steps' run settings that runs start from (schedule, sensor, backfill, "
        "launchpad), as the launchpad's runtime block: setting: value for every step that "
        "has it, or step: {setting: value}"
    )


OPTION_NAMES = tuple(f.name for f in fields(WorkflowOptions))


def describe(option: str) -> str:
    """The description of ``option``, for the YAML component's schema and the docs."""
    return next(f.metadata["doc"] for f in fields(WorkflowOptions) if f.name == option)
