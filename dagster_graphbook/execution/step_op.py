"""The body of a step's op: config and resources -> step instance -> driver -> one Output per pin."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import dagster as dg

from .driver import run_step, step_label
from .errors import StepFailure

RUNTIME_KEY = "runtime"
_MAX_ERROR_ROWS = 50


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
    function_params: Mapping[str, Optional[str]] = field(default_factory=dict)  # workflow's code per function param
    overridable: Tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return step_label(self.workflow, self.step_name, self.node_id)


def config_kwargs(config: Mapping[str, Any], function_params: Mapping[str, Optional[str]], overridable: Tuple[str, ...], label: str, partition_key: Optional[str] = None) -> Dict[str, Any]:
    """Constructor kwargs from op or resource config; refuses run config that replaces function code."""
    kwargs: Dict[str, Any] = {}
    for key, value in config.items():
        if key in function_params and value != function_params[key] and key not in overridable:
            raise StepFailure(label, f"run config replaces the code of function parameter {key!r}, which the workflow does not mark overridable; "
                              "function parameters run code, so only the workflow may set them unless it marks the parameter "
                              "('\"overridable\": true' in the parameter's entry, or node.param(key, value, overridable=True))")
        if isinstance(value, str) and partition_key is not None:
            value = value.replace("{partition_key}", partition_key)
        if value is not None:
            kwargs[key] = value
    return kwargs


def _step_kwargs(context: dg.AssetExecutionContext, plan: StepPlan, config: Dict[str, Any]) -> Dict[str, Any]:
    partition_key = context.partition_key if context.has_partition_key else None
    kwargs = config_kwargs(config, plan.function_params, plan.overridable, plan.label, partition_key)
    for key, resource_key in plan.resource_keys.items():
        kwargs[key] = getattr(context.resources, resource_key)
    return kwargs


def _error_metadata(errors: List[Any]) -> Dict[str, Any]:
    if not errors:
        return {"errors_skipped": dg.MetadataValue.int(0)}
    rows = [dg.TableRecord({"stage": e.stage, "note": e.note_index, "item": "" if e.item_index is None else f"{e.item_index}: {e.item}", "error": e.headline()}) for e in errors[:_MAX_ERROR_ROWS]]
    schema = dg.TableSchema(columns=[dg.TableColumn("stage", "string"), dg.TableColumn("note", "int"), dg.TableColumn("item", "string"), dg.TableColumn("error", "string")])
    return {"errors_skipped": dg.MetadataValue.int(len(errors)), "errors": dg.MetadataValue.table(rows, schema=schema)}


def _stats_metadata(stats: Dict[str, Any], files: List[Tuple[str, int]]) -> Dict[str, Any]:
    meta: Dict[str, Any] = {}
    for key, value in stats.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            meta[key] = dg.MetadataValue.text(str(value))
        elif isinstance(value, int):
            meta[key] = dg.MetadataValue.int(value)
        else:
            meta[key] = dg.MetadataValue.float(float(value))
    if files:
        meta["files_written"] = dg.MetadataValue.int(len(files))
        meta["files_bytes"] = dg.MetadataValue.int(sum(size for _, size in files))
        meta["files_sample"] = dg.MetadataValue.json([p for p, _ in files[:10]])
    return meta


def _retry_or_raise(context: dg.AssetExecutionContext, plan: StepPlan, runtime: Mapping[str, Any], exc: Exception) -> None:
    """``runtime.retries`` from run config: ask Dagster to run the step again; once spent, the step fails with ``exc`` itself."""
    retries = int(runtime.get("retries") or 0)
    attempt = context.retry_number + 1
    if attempt > retries:
        return
    context.log.warning(f"{plan.label}: attempt {attempt} of {retries + 1} failed: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}; retrying")
    raise dg.RetryRequested(max_retries=retries, seconds_to_wait=float(runtime.get("retry_delay_s") or 0.0)) from exc


def execute_step(context: dg.AssetExecutionContext, plan: StepPlan, inputs: Mapping[str, List[Any]]) -> Iterator[dg.Output]:
    """Run the step over the notes of all its inputs and yield its notes per pin."""
    config = dict(context.op_execution_context.op_config or {})
    runtime = dict(config.pop(RUNTIME_KEY, None) or {})
    kwargs = _step_kwargs(context, plan, config)
    notes = [note for name in plan.input_names for note in (inputs[name] or [])]
    try:
        step = plan.cls(**kwargs)
    except Exception as exc:
        raise StepFailure(plan.label, f"could not create the step from its parameters {sorted(kwargs)}: {type(exc).__name__}: {exc}") from exc
    step.id = plan.node_id
    if context.has_partition_key and not hasattr(step, "partition_key"):
        step.partition_key = context.partition_key

    def emit(level: str, message: str) -> None:
        getattr(context.log, level if level in ("info", "warning", "error", "debug") else "info")(message)

    batch_settings = None
    if plan.kind == "batch":
        from .batch import BatchSettings

        batch_settings = BatchSettings.from_config(runtime)
    try:
        result = run_step(step, plan.kind, notes, pins=plan.pins, label=plan.label, node=(plan.node_id, plan.step_name), emit=emit,
                          on_item_error=runtime.get("on_item_error", "raise"), batch_settings=batch_settings)
    except Exception as exc:
        _retry_or_raise(context, plan, runtime, exc)
        raise
    for error in result.errors:
        context.log.warning(f"{plan.label}: skipped {error.headline()}")
    meta = {**_stats_metadata(result.stats, result.files), **_error_metadata(result.errors), "notes_in": dg.MetadataValue.int(len(notes))}
    if result.files:  # which files this materialization wrote (issue 11.5)
        from ..manifests import write_manifest

        storage = context.instance.storage_directory()
        manifest = write_manifest(result.files, storage, context.op_execution_context.op_def.name, context.run_id)
        meta["files_manifest"] = dg.MetadataValue.path(manifest)
    meta.update(_stats_metadata(dict(getattr(step, "dagster_metadata", None) or {}), []))  # figures the step reports (e.g. accuracy), plotted by the UI
    for pin in plan.pins:
        yield dg.Output(result.outputs.get(pin, []), output_name=plan.output_names[pin], metadata=meta)
