"""A workflow as Dagster definitions: one multi-asset op per step (one asset per output pin),
one resource per resource node, one job selecting all of the workflow's assets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import dagster as dg

from . import params as ptypes
from .checks import BoundCheck, StepCheck, with_checks
from .dead_runs import join_run
from .execution.step_op import RUNTIME_KEY, StepPlan, execute_step
from .io import NOTES_IO_MANAGER_KEY
from .streaming.advice import warn_heavy_outputs
from .translator import GraphbookTranslator, WorkflowNames
from .trust import code_params, locked_resource_params
from .workflow import Workflow, WorkflowError, WorkflowNode

_WORKER_TYPE = dg.Enum("GraphbookWorkerType", [dg.EnumValue("process"), dg.EnumValue("thread")])
_START_METHOD = dg.Enum(
    "GraphbookStartMethod",
    [dg.EnumValue("fork"), dg.EnumValue("spawn"), dg.EnumValue("forkserver")],
)
_ON_ERROR = dg.Enum("GraphbookOnItemError", [dg.EnumValue("raise"), dg.EnumValue("skip")])


def runtime_fields(kind: str) -> Dict[str, dg.Field]:
    """Run settings of a step op, next to its parameters (under ``runtime``)."""
    fields: Dict[str, dg.Field] = {
        "on_item_error": dg.Field(
            _ON_ERROR,
            default_value="raise",
            description="raise: fail the op on a bad note or item; skip: record it (metadata "
            "'errors') and go on",
        ),
        "retries": dg.Field(
            int,
            default_value=0,
            description="run the step again this many times when it fails (Dagster retry: the "
            "step restarts from its stored inputs)",
        ),
        "retry_delay_s": dg.Field(
            float, default_value=0.0, description="seconds to wait before each retry"
        ),
        "stall_warning_s": dg.Field(
            float,
            default_value=60.0,
            description="log what the step is stuck in when it makes no progress for this "
            "long (0: never)",
        ),
    }
    if kind == "batch":
        fields.update(
            {
                "num_workers": dg.Field(
                    int,
                    default_value=2,
                    description="loader worker processes (or threads); 0 loads in the step process",
                ),
                "worker_type": dg.Field(
                    _WORKER_TYPE,
                    default_value="process",
                    description="process: DataLoader workers (shared-memory tensors); thread: "
                    "for load_fns that release the GIL",
                ),
                "prefetch": dg.Field(
                    int, default_value=2, description="batches loaded ahead per worker"
                ),
                "start_method": dg.Field(
                    _START_METHOD,
                    default_value="fork",
                    description="how worker processes start; spawn/forkserver need "
                    "load_fn/dump_fn in an installed package",
                ),
                "device": dg.Field(
                    str,
                    default_value="auto",
                    description="auto (CUDA when available), cpu, cuda or cuda:N",
                ),
                "dump_workers": dg.Field(
                    dg.Noneable(int),
                    default_value=None,
                    description="dump_fn workers (default: num_workers)",
                ),
                "max_dumps_in_flight": dg.Field(
                    int,
                    default_value=64,
                    description="dump calls pending before on_item_batch waits",
                ),
                "progress_interval_s": dg.Field(
                    float,
                    default_value=5.0,
                    description="seconds between progress lines in the event log",
                ),
                "worker_nice": dg.Field(
                    int,
                    default_value=0,
                    description="added to the nice value of loader and dump workers, so a "
                    "CPU-bound model in the step keeps its core",
                ),
                # integrity settings (issue 11)
                "max_skipped_fraction": dg.Field(
                    dg.Noneable(float),
                    default_value=None,
                    description="under skip: fail the step when a larger share of its items was "
                    "lost to errors",
                ),
                "call_timeout_s": dg.Field(
                    dg.Noneable(float),
                    default_value=None,
                    description="a load_fn/dump_fn call running longer fails its item (worker "
                    "processes and in-step loading)",
                ),
            }
        )
    return fields


def param_fields(workflow: Workflow, node: WorkflowNode) -> Dict[str, dg.Field]:
    """Launchpad fields for the parameters not bound to a resource; defaults are the workflow's
    values."""
    fields = {}
    for key, spec in node.parameters.items():
        if key in node.resource_params:
            continue
        if key == RUNTIME_KEY:
            raise WorkflowError(
                workflow.source,
                [
                    f"{node.describe()}: parameter name {RUNTIME_KEY!r} is reserved "
                    "for run settings; rename it"
                ],
            )
        value = node.values.get(key)
        if value is None:
            value = ptypes.unset_value(node.cls, key, spec)
        fields[key] = ptypes.config_field(spec, value, has_default=value is not None)
    return fields


def _function_params(node: WorkflowNode) -> Dict[str, Optional[str]]:
    """The workflow's value of each parameter the step compiles (see ``trust.code_params``)."""
    code = code_params(node)
    return {
        k: node.values.get(k, s.get("default"))
        for k, s in node.parameters.items()
        if k in code and k not in node.resource_params
    }


def _overridable(workflow: Workflow, node: WorkflowNode) -> tuple:
    """Function parameters whose code run config may replace: marked in the workflow file, or by
    ``GraphbookWorkflow``."""
    return tuple(sorted({*workflow.overridable_functions, *node.overridable}))


@dataclass
class WorkflowDefs:
    """The Dagster pieces of one workflow."""

    workflow: Workflow
    assets: List[dg.AssetsDefinition]
    resources: Dict[str, dg.ResourceDefinition]
    job: Any
    asset_keys: List[dg.AssetKey] = field(default_factory=list)
    names: Optional[WorkflowNames] = None  # the translator's names, the one source of them


def build_workflow_defs(
    workflow: Workflow,
    translator: Optional[GraphbookTranslator] = None,
    *,
    partitions_def: Optional[dg.PartitionsDefinition] = None,
    retry_policy: Optional[dg.RetryPolicy] = None,
    op_tags: Optional[Dict[str, Any]] = None,
    job_tags: Optional[Dict[str, str]] = None,
    external_deps: Optional[Dict[str, List[dg.AssetKey]]] = None,
    executor_def: Optional[dg.ExecutorDefinition] = None,
    streaming: Any = False,
    checks: Optional[Dict[str, List[StepCheck]]] = None,
    pool: Optional[str] = None,
) -> WorkflowDefs:
    """Translate one validated workflow (``streaming``: ``True`` runs all steps as one streaming
    op, a list of step names runs those, a connected segment, as one op; see ``streaming``).

    ``retry_policy`` and ``pool`` apply to every step op where set; else the translator's
    ``get_retry_policy`` and ``get_pool`` decide per step.
    """
    from .streaming.segment import segment_asset, segment_ids

    translator = translator or GraphbookTranslator()
    names = translator.names(workflow)
    resource_keys = dict(names.resource_keys)
    resources = {
        resource_keys[n.id]: _resource_def(workflow, n, resource_keys, translator)
        for n in workflow.resources()
    }
    assets, keys = [], []
    segment = segment_ids(workflow, names, streaming)
    if segment:
        checked = [names.steps[i].step for i in segment if (checks or {}).get(i)]
        if checked:
            raise WorkflowError(
                workflow.source,
                [
                    f"asset checks on streamed steps ({', '.join(checked)}) are not supported "
                    "yet; leave those steps out of the streaming segment or drop the checks"
                ],
            )
        parts = {
            i: _plan_and_config(workflow, workflow.nodes[i], names, resource_keys, {})
            for i in segment
        }
        deps = sorted({k for i in segment for k in (external_deps or {}).get(i, [])}, key=str)
        asset = segment_asset(
            workflow,
            translator,
            {i: p for i, (p, _) in parts.items()},
            {i: c for i, (_, c) in parts.items()},
            segment=segment,
            partitions_def=partitions_def,
            retry_policy=retry_policy,
            op_tags=op_tags,
            external_deps=deps,
            pool=pool,
        )
        assets, keys = [asset], list(asset.keys)
    for node in (n for n in workflow.steps() if n.id not in segment):
        asset = _step_asset(
            workflow,
            node,
            translator,
            resource_keys,
            partitions_def,
            retry_policy,
            op_tags or {},
            (external_deps or {}).get(node.id, []),
            (checks or {}).get(node.id, []),
            pool,
        )
        assets.append(asset)
        keys += list(asset.keys)
    job = dg.define_asset_job(
        names.job_name,
        selection=dg.AssetSelection.assets(*keys),
        description=translator.get_job_description(workflow),
        tags=job_tags,
        executor_def=executor_def,
    )
    return WorkflowDefs(workflow, assets, resources, job, keys, names)


def _step_asset(
    workflow: Workflow,
    node: WorkflowNode,
    translator: GraphbookTranslator,
    resource_keys: Dict[str, str],
    partitions_def: Any,
    retry_policy: Any,
    op_tags: Dict[str, Any],
    external_deps: List[dg.AssetKey],
    checks: Sequence[StepCheck] = (),
    pool: Optional[str] = None,
) -> dg.AssetsDefinition:
    names = translator.names(workflow)
    step = names.steps[node.id]
    output_names = dict(step.output_names)
    label = f"workflow '{workflow.name}', step '{step.step}' (node {node.id})"
    bound = []
    for check in checks:
        pin = check.pin or node.outputs[0]
        bound.append(BoundCheck(check, step.key(pin), pin, label))
    ins = input_assets(names, workflow, node)
    extra, internal = spec_deps(step.specs, output_names, ins, external_deps)
    outs = {
        output_names[pin]: dg.AssetOut.from_spec(
            spec.replace_attributes(deps=[]), io_manager_key=NOTES_IO_MANAGER_KEY
        )
        for pin, spec in step.specs.items()
    }
    plan, config = _plan_and_config(workflow, node, names, resource_keys, ins)

    @dg.multi_asset(
        name=step.op_name,
        outs=outs,
        ins=ins,
        deps=extra or None,
        internal_asset_deps=internal,
        config_schema=config,
        required_resource_keys=set(plan.resource_keys.values()),
        op_tags={
            **translator.get_op_tags(workflow, node),
            **op_tags,
            **names.steps_tag([node.id], {node.id: plan.function_params}),
        },
        pool=pool if pool is not None else translator.get_pool(workflow, node),
        partitions_def=partitions_def,
        retry_policy=retry_policy or translator.get_retry_policy(workflow, node),
        description=translator.get_description(workflow, node),
        can_subset=False,
        check_specs=[b.spec(partitions_def) for b in bound] or None,
    )
    def _step(
        context, **inputs
    ):  # no annotation: `from __future__ import annotations` would turn it into a string
        pin_of = {v: k for k, v in output_names.items()}
        with join_run(context.instance, context.run_id):
            steps = warn_heavy_outputs(context, plan.label, execute_step(context, plan, inputs))
            yield from with_checks(steps, bound, pin_of)

    return _step


def input_assets(
    names: WorkflowNames, workflow: Workflow, node: WorkflowNode
) -> Dict[str, dg.AssetIn]:
    """The node's inputs, each keyed by the upstream pin's spec (with the partition mapping an
    overridden spec gives that dep)."""
    own = {d.asset_key: d for spec in names.steps[node.id].specs.values() for d in spec.deps}
    ins: Dict[str, dg.AssetIn] = {}
    for src_id, pin in node.inputs:
        key = names.steps[src_id].key(pin)
        mapping = own[key].partition_mapping if key in own else None
        ins[f"in_{len(ins)}"] = dg.AssetIn(key=key, partition_mapping=mapping)
    return ins


def spec_deps(
    specs: Mapping[str, dg.AssetSpec],
    output_names: Mapping[str, str],
    ins: Mapping[str, dg.AssetIn],
    external: Sequence[Any],
) -> Tuple[List[dg.AssetDep], Dict[str, Set[dg.AssetKey]]]:
    """Non-data deps (external inputs, deps an overridden spec adds) and each output's deps."""
    inputs = {i.key for i in ins.values()}
    extra: Dict[dg.AssetKey, dg.AssetDep] = {}
    for dep in (dg.AssetDep(k) for k in external):
        extra.setdefault(dep.asset_key, dep)
    internal: Dict[str, Set[dg.AssetKey]] = {}
    for pin, spec in specs.items():
        own = {d.asset_key for d in spec.deps if d.asset_key not in inputs}
        for dep in spec.deps:
            if dep.asset_key in own:
                extra.setdefault(dep.asset_key, dep)
        internal[output_names[pin]] = inputs | own | set(external)
    return list(extra.values()), internal


def _plan_and_config(
    workflow: Workflow,
    node: WorkflowNode,
    names: WorkflowNames,
    resource_keys: Dict[str, str],
    ins: Dict[str, Any],
) -> tuple:
    """What an op runs for ``node``, and its config fields (a step op's or a streaming op's)."""
    kind = node.step_kind
    step = names.steps[node.id]
    plan = StepPlan(
        workflow=workflow.name,
        workflow_source=workflow.source,
        node_id=node.id,
        step_name=step.step,
        cls=node.cls,
        kind=kind,
        pins=tuple(node.outputs),
        output_names=dict(step.output_names),
        input_names=tuple(ins),
        resource_keys={p: resource_keys[r] for p, r in node.resource_params.items()},
        function_params=_function_params(node),
        overridable=_overridable(workflow, node),
    )
    runtime = dg.Field(runtime_fields(kind))  # all fields default: the launchpad shows the block
    return plan, {**param_fields(workflow, node), RUNTIME_KEY: runtime}


def _resource_def(
    workflow: Workflow,
    node: WorkflowNode,
    resource_keys: Dict[str, str],
    translator: GraphbookTranslator,
) -> dg.ResourceDefinition:
    fields = param_fields(workflow, node)
    bound = {param: resource_keys[rid] for param, rid in node.resource_params.items()}
    functions = _function_params(node)
    # a resource whose value is compiled as code keeps the workflow's values
    locked, why = locked_resource_params(workflow, node)
    functions = {**locked, **functions}
    label = f"workflow '{workflow.name}', resource '{node.label or node.name}' (node {node.id})"
    overridable = tuple(k for k in _overridable(workflow, node) if k not in locked)

    def build(init_context: dg.InitResourceContext) -> Any:
        from .authoring.log import LogTarget, log_target
        from .execution.errors import StepFailure
        from .execution.step_op import config_kwargs

        config = init_context.resource_config or {}
        kwargs = config_kwargs(config, functions, overridable, label, why=why)
        for param, key in bound.items():
            kwargs[param] = getattr(init_context.resources, key)

        def emit(level: str, msg: str) -> None:
            known = level if level in ("info", "warning", "error") else "info"
            getattr(init_context.log, known)(msg)

        # a step process joins its run before building (a model load), not only in the op body
        with join_run(init_context.instance, init_context.run_id):
            with log_target(LogTarget(node.id, node.name, emit)):
                try:
                    value = node.cls(**kwargs).value()
                except Exception as exc:
                    raise StepFailure(
                        label, f"could not build the resource: {type(exc).__name__}: {exc}"
                    ) from exc
            yield value

    return dg.ResourceDefinition(
        build,
        config_schema=fields,
        required_resource_keys=set(bound.values()),
        description=translator.get_description(workflow, node),
    )
