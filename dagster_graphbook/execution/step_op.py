"""The body of a step's op: config and resources -> step instance -> driver -> one Output per
pin."""

from __future__ import annotations

import heapq
import itertools
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import dagster as dg

from .driver import run_step, step_label
from .errors import ItemError, StepFailure
from .job_steps import PARTITION_PLACEHOLDER, placeholder_message, unfilled_placeholders
from .step_metadata import step_metadata

RUNTIME_KEY = "runtime"


@dataclass(frozen=True)
class StepPlan:
    """What an op needs to run one workflow step, fixed at definition time."""

    workflow: str
    workflow_source: str
    node_id: str
    step_name: str
    cls: type
    kind: str  # source | step | batch
    pins: Tuple[str, ...]
    output_names: Mapping[str, str]  # pin -> Dagster output name
    input_names: Tuple[str, ...]  # in edge order
    resource_keys: Mapping[str, str]  # parameter -> Dagster resource key
    function_params: Mapping[str, Optional[str]] = field(
        default_factory=dict
    )  # workflow's code per function param
    overridable: Tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return step_label(self.workflow, self.step_name, self.node_id)


def config_kwargs(
    config: Mapping[str, Any],
    function_params: Mapping[str, Optional[str]],
    overridable: Tuple[str, ...],
    label: str,
    partition_key: Optional[str] = None,
    why: Optional[Dict[str, str]] = None,
) -> Dict[str, Any]:
    """Constructor kwargs from op or resource config; refuses run config that replaces code.

    ``{partition_key}`` is filled into string parameters, never into code (function parameters).
    """
    from ..trust import check_code_config

    check_code_config(dict(config), dict(function_params), overridable, label, why)
    kwargs: Dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, str) and partition_key is not None and key not in function_params:
            value = value.replace(PARTITION_PLACEHOLDER, partition_key)
        if value is not None:
            kwargs[key] = value
    return kwargs


def _partition_key(context: dg.AssetExecutionContext, plan: StepPlan) -> Optional[str]:
    """The run's partition key, checked against the asset's partitions (None when unpartitioned)."""
    from ..trust import check_partition_key

    partitions_def = context.assets_def.partitions_def
    tagged = context.run.tags.get("dagster/partition")
    if partitions_def is None and tagged is None:
        return None
    if partitions_def is not None and not context.has_partition_key:
        return None  # a partition range run: no single key to fill in
    key = context.partition_key if partitions_def is not None else tagged
    return check_partition_key(key, partitions_def, context.instance, plan.label)


def make_step(context: dg.AssetExecutionContext, plan: StepPlan, config: Dict[str, Any]) -> Any:
    """The step instance from its op config (parameters, checked partition key) and resources."""
    partition_key = _partition_key(context, plan)
    unfilled = unfilled_placeholders(config, plan.function_params) if partition_key is None else {}
    if unfilled:  # a literal '{partition_key}' path: FileNotFoundError later, or a wrong folder
        partitioned = context.assets_def.partitions_def is not None
        found = {f"{plan.step_name}.{k}": v for k, v in unfilled.items()}
        raise StepFailure(plan.label, placeholder_message(found, partitioned), allow_retries=False)
    kwargs = config_kwargs(
        config, plan.function_params, plan.overridable, plan.label, partition_key
    )
    for key, resource_key in plan.resource_keys.items():
        kwargs[key] = getattr(context.resources, resource_key)
    try:
        step = plan.cls(**kwargs)
    except Exception as exc:
        raise StepFailure(
            plan.label,
            f"could not create the step from its parameters {sorted(kwargs)}: "
            f"{type(exc).__name__}: {exc}",
        ) from exc
    step.id = plan.node_id
    if partition_key is not None and not hasattr(step, "partition_key"):
        step.partition_key = partition_key
    return step


@contextmanager
def failures_named(plan: StepPlan) -> Iterator[None]:
    """Every error of the step ends as a ``StepFailure`` naming its workflow, step and node: a
    ``dg.Failure``, so its headline (not "Error occurred while executing op") leads the run page."""
    try:
        yield
    except StepFailure as exc:
        exc.at(plan.workflow, plan.step_name, plan.node_id)
        raise
    except (dg.DagsterError, dg.RetryRequested, dg.Failure):
        raise  # Dagster's own control flow, and failures that already carry their message
    except Exception as exc:
        error = ItemError("step", -1, None, "", "", traceback.format_exc())
        failure = StepFailure(plan.label, f"{type(exc).__name__}: {exc}", error)
        raise failure.at(plan.workflow, plan.step_name, plan.node_id) from exc


def _retry_or_raise(
    context: dg.AssetExecutionContext, plan: StepPlan, runtime: Mapping[str, Any], exc: Exception
) -> None:
    """``runtime.retries`` from run config: ask Dagster to run the step again; once spent, the step
    fails with ``exc`` itself."""
    retries = int(runtime.get("retries") or 0)
    attempt = context.retry_number + 1
    if attempt > retries:
        return
    context.log.warning(
        f"{plan.label}: attempt {attempt} of {retries + 1} failed: "
        f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}; retrying"
    )
    raise dg.RetryRequested(
        max_retries=retries, seconds_to_wait=float(runtime.get("retry_delay_s") or 0.0)
    ) from exc


def interleave(streams: List[List[Any]]) -> List[Any]:
    """Notes of several input edges in Graphbook's order.

    Graphbook keeps one queue per parent step (its pins' notes in the order the parent emitted
    them) and a child takes one note from each parent in turn. So edges from one parent merge
    in emission order (``Copy`` into one step twice: 0,0,1,1,2,2; ``Split``'s A and B: the input
    order), and parents alternate (Graphbook's first parent is arbitrary: a set; here the first
    edge's). Concatenating the edges would give 0,1,2,0,1,2.
    """
    if len(streams) == 1:
        return list(streams[0])
    parents: Dict[Any, List[List[Any]]] = {}
    for i, stream in enumerate(streams):
        parents.setdefault(getattr(stream, "source", None) or ("edge", i), []).append(stream)
    queues = [_emission_order(group) for group in parents.values()]
    turns = itertools.zip_longest(*queues, fillvalue=_GAP)
    return [n for turn in turns for n in turn if n is not _GAP]


def _emission_order(streams: List[List[Any]]) -> List[Any]:
    if len(streams) == 1:
        return list(streams[0])
    if all(len(getattr(s, "order", ())) == len(s) for s in streams):
        tagged = heapq.merge(
            *[zip(s.order, range(len(s)), [k] * len(s)) for k, s in enumerate(streams)]
        )
        return [streams[k][i] for _, i, k in tagged]
    turns = itertools.zip_longest(*streams, fillvalue=_GAP)
    return [n for turn in turns for n in turn if n is not _GAP]


_GAP = object()


def execute_step(
    context: dg.AssetExecutionContext, plan: StepPlan, inputs: Mapping[str, List[Any]]
) -> Iterator[dg.Output]:
    """Run the step over the notes of all its inputs and yield its notes per pin."""
    config = dict(context.op_execution_context.op_config or {})
    runtime = dict(config.pop(RUNTIME_KEY, None) or {})
    with failures_named(plan):
        step = make_step(context, plan, config)
    notes = interleave([inputs[name] or [] for name in plan.input_names])

    def emit(level: str, message: str) -> None:
        getattr(context.log, level if level in ("info", "warning", "error", "debug") else "info")(
            message
        )

    batch_settings = None
    if plan.kind == "batch":
        from .batch import BatchSettings

        batch_settings = BatchSettings.from_config(runtime)
    with failures_named(plan):
        try:
            result = run_step(
                step,
                plan.kind,
                notes,
                pins=plan.pins,
                label=plan.label,
                node=(plan.node_id, plan.step_name),
                emit=emit,
                on_item_error=runtime.get("on_item_error", "raise"),
                batch_settings=batch_settings,
                stall_warning_s=runtime.get("stall_warning_s", 60.0),
            )
        except Exception as exc:
            _retry_or_raise(context, plan, runtime, exc)
            raise
    for error in result.errors:
        context.log.warning(f"{plan.label}: skipped {error.headline()}")
    stats = (
        dict(result.stats) if plan.kind == "source" else {**result.stats, "notes_in": len(notes)}
    )
    figures = dict(getattr(step, "dagster_metadata", None) or {})  # e.g. accuracy, plotted
    meta = step_metadata(stats, result.files, result.errors, figures)
    if result.files:  # which files this materialization wrote (issue 11.5)
        from ..manifests import write_manifest

        storage = context.instance.storage_directory()
        manifest = write_manifest(
            result.files, storage, context.op_execution_context.op_def.name, context.run_id
        )
        meta["files_manifest"] = dg.MetadataValue.path(manifest)
    for pin in plan.pins:
        notes_out = result.outputs.get(pin, [])
        if hasattr(notes_out, "source"):
            notes_out.source = plan.node_id  # children fed by several of its pins merge by emission
        yield dg.Output(notes_out, output_name=plan.output_names[pin], metadata=meta)
