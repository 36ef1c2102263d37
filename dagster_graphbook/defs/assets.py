"""A workflow as Dagster definitions: one multi-asset op per step (one asset per output pin),
one resource per resource node, one job selecting all of the workflow's assets."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Dict, List, Mapping, Optional

import dagster as dg

from ..errors import StepRef
from ..execution import (
    SHARD_CRASH_RETRY,
    check_partition_key,
    code_folders,
    commit_needs_step,
    commit_shards,
    config_kwargs,
    declared_defaults,
    execute_op,
    join_run,
    log_emitter,
    named_paths,
    plan_shards,
    record_resource,
    refuse_unfilled,
    resource_version,
    run_shard,
    stamps,
    version_of,
    warn_heavy_outputs,
    with_checks,
)
from ..model.workflow import Workflow, WorkflowNode
from ..plan.checks import StepCheck
from ..plan.gpus import without_gpus
from ..plan.job_steps import NOTES_IO_MANAGER_KEY
from ..plan.options import WorkflowOptions
from ..plan.plan import (
    OpPlan,
    WorkflowPlan,
    compile_workflow,
    function_params,
    overridable,
    param_fields,
)
from ..plan.translator import GraphbookTranslator, WorkflowNames
from ..plan.trust import locked_resource_params


@dataclass
class WorkflowDefs:
    """The Dagster pieces of one workflow."""

    workflow: Workflow
    assets: List[dg.AssetsDefinition]
    resources: Dict[str, dg.ResourceDefinition]
    job: Any
    asset_keys: List[dg.AssetKey] = field(default_factory=list)
    names: Optional[WorkflowNames] = None  # the translator's names, the one source of them
    plan: Optional[WorkflowPlan] = None  # what every op runs, compiled once


def build_workflow_defs(
    workflow: Workflow,
    translator: Optional[GraphbookTranslator] = None,
    options: WorkflowOptions = WorkflowOptions(),
    *,
    external_deps: Optional[Dict[str, List[dg.AssetKey]]] = None,
    executor_def: Optional[dg.ExecutorDefinition] = None,
    checks: Optional[Dict[str, List[StepCheck]]] = None,
    storage: Optional[Dict[str, Any]] = None,
) -> WorkflowDefs:
    """Translate one validated workflow as ``options`` say (``compile_workflow``), its job tagged
    ``options.job_tags`` on ``executor_def``. ``external_deps`` and ``checks``: ``options``' bound
    to node ids; ``storage``: the notes IO manager's definition metadata (``notes_metadata``:
    where the workflow's notes go, how many kept). The translator's ``get_retry_policy`` and
    ``get_pool`` decide per step where ``options`` leave them unset."""
    translator = translator or GraphbookTranslator()
    names = translator.names(workflow)
    resource_keys = dict(names.resource_keys)
    partitions_def = options.partitions_def
    resources = {
        resource_keys[n.id]: _resource_def(workflow, n, resource_keys, translator, partitions_def)
        for n in workflow.resources()
    }
    plan = compile_workflow(
        workflow,
        translator,
        options,
        checks=checks,
        external_deps=external_deps,
        storage=storage,
    )
    assets = [op_asset(op) for op in plan.ops]
    keys = [key for asset in assets for key in asset.keys]
    job = dg.define_asset_job(
        names.job_name,
        selection=dg.AssetSelection.assets(*keys),
        description=translator.get_job_description(workflow),
        tags=options.job_tags,
        executor_def=executor_def,
    )
    return WorkflowDefs(workflow, assets, resources, job, keys, names, plan)


def op_asset(op: OpPlan) -> dg.AssetsDefinition:
    """The one builder: a ``multi_asset`` over the op's pins whose body is ``execute_op``, for a
    step op and a streaming op alike; a sharded step's is a graph of three ops around the same
    body (``sharded_asset``)."""
    if op.shard is not None:
        return sharded_asset(op)
    pin_of = {name: pin for (_, pin), name in op.outputs.items()}
    label = op.steps[0].label

    @dg.multi_asset(**op.asset_args)
    def _op(context, **inputs):  # no annotation: `from __future__ import annotations` -> a string
        with join_run(context.instance, context.dagster_run, context.log.warning):
            outputs = execute_op(context, op, inputs)
            if not op.streamed:  # a streamed op stores no tensors between its steps
                outputs = warn_heavy_outputs(context, label, outputs)
            yield from with_checks(outputs, op.checks, pin_of, context)

    return _op


def sharded_asset(op: OpPlan) -> dg.AssetsDefinition:
    """A sharded batch step: a ``graph_multi_asset`` with the unsharded op's outs, ins, deps,
    partitions, checks and config path, whose graph is plan (a ``DynamicOut`` of note slices)
    -> one shard op per slice (``map``) -> commit (``collect``), the only op that materializes.

    Dagster ignores an ``AssetOut``'s IO manager inside a graph (dagster issue 15001), so the
    inner ops' outputs carry the notes IO manager themselves (the slices and shard results as
    run-isolated step outputs, see ``versions.step_output_path``); the op settings (tags, pool,
    retry policy) go on each inner op, the step's resources on the ops that build the step."""
    args, shard = op.asset_args, op.shard
    assert shard is not None
    pin_of = {name: pin for (_, pin), name in op.outputs.items()}
    plan_step = op.steps[0]
    check_names = [spec.get_python_identifier() for spec in args["check_specs"] or ()]
    deps = {f"dep_{i}": d for i, d in enumerate(args["deps"] or ())}
    ops = dict(
        config_schema=args["config_schema"],
        tags=args["op_tags"],
        pool=args["pool"],
        retry_policy=args["retry_policy"],
        description=args["description"],
    )
    resources = set(args["required_resource_keys"])
    # plan splits a list and commit merges results: neither holds a GPU, a GPU pod or task, nor
    # a slot of the step's pool, which the shards need
    light = {
        **ops,
        "tags": without_gpus(args["op_tags"] or {}),
        "pool": None,
    }

    # a shard whose process dies (kill -9, out of memory) raises nothing that runtime.retries
    # sees: without a policy of the workflow's, a shard op is retried once for a crash only
    crash_only = args["retry_policy"] is None
    shard_ops = {**ops, "retry_policy": args["retry_policy"] or SHARD_CRASH_RETRY}
    stored: Dict[str, Any] = dict(io_manager_key=NOTES_IO_MANAGER_KEY, metadata=dict(op.storage))

    @dg.op(
        name=shard.plan_op,
        ins={**{n: dg.In() for n in args["ins"]}, **{n: dg.In(dg.Nothing) for n in deps}},
        out=dg.DynamicOut(**stored),
        **light,
    )
    def plan_op(context, **inputs):
        with join_run(context.instance, context.dagster_run, context.log.warning):
            yield from plan_shards(context, op, inputs)

    @dg.op(
        name=shard.shard_op,
        out=dg.Out(**stored),
        required_resource_keys=set(),  # built after the GPU lease (shards.shard_resources)
        **shard_ops,
    )
    def shard_op(context, piece):
        with join_run(context.instance, context.dagster_run, context.log.warning):
            return run_shard(context, op, piece, crash_only=crash_only)

    outs = {
        name: dg.Out(io_manager_key=NOTES_IO_MANAGER_KEY)
        if (node_id, pin) in op.stored
        else dg.Out(dg.Nothing)
        for (node_id, pin), name in op.outputs.items()
    }
    outs.update({name: dg.Out(dg.Nothing, is_required=False) for name in check_names})

    @dg.op(
        name=shard.commit_op,
        out=outs,
        required_resource_keys=resources if commit_needs_step(plan_step.cls) else set(),
        **light,
    )
    def commit_op(context, shards):
        with join_run(context.instance, context.dagster_run, context.log.warning):
            outputs = warn_heavy_outputs(
                context, plan_step.label, commit_shards(context, op, shards)
            )
            yield from with_checks(outputs, op.checks, pin_of, context)

    inner = (shard.plan_op, shard.shard_op, shard.commit_op)
    config = dg.ConfigMapping(
        config_schema=args["config_schema"],
        config_fn=lambda c: {name: {"config": c} for name in inner},
    )
    ins = dict(args["ins"])
    ins.update(
        {
            n: dg.AssetIn(
                d.asset_key, partition_mapping=d.partition_mapping, dagster_type=dg.Nothing
            )
            for n, d in deps.items()
        }
    )

    @dg.graph_multi_asset(
        name=args["name"],
        group_name=_one_group(args["outs"]),
        outs=args["outs"],
        ins=ins,
        partitions_def=args["partitions_def"],
        check_specs=args["check_specs"],
        can_subset=False,
        config=config,
    )
    def _graph(**inputs):
        committed = commit_op(plan_op(**inputs).map(shard_op).collect())
        committed = committed if isinstance(committed, tuple) else (committed,)
        return dict(zip(outs, committed))

    return _graph


def _one_group(outs: Mapping[str, dg.AssetOut]) -> Optional[str]:
    """The group of a sharded step's assets: ``graph_multi_asset`` drops each ``AssetOut``'s (its
    assets landed in ``default``), so it is given the step's, which all its pins share unless a
    translator's ``get_group_name`` gives them different ones (then Dagster's default)."""
    groups = {out.group_name for out in outs.values()}
    return groups.pop() if len(groups) == 1 else None


def _run_partition(
    init_context: dg.InitResourceContext,
    config: Mapping[str, Any],
    functions: Mapping[str, Any],
    partitions_def: Optional[dg.PartitionsDefinition],
    label: StepRef,
) -> Optional[str]:
    """The partition key a resource's ``{partition_key}`` parameters get: the run's (checked as
    a step's is); a run of no single partition is refused when one holds the placeholder."""
    run = init_context.dagster_run
    key = run.tags.get("dagster/partition") if run is not None else None
    if key is not None:
        return check_partition_key(key, partitions_def, init_context.instance, label)
    refuse_unfilled(config, functions, label, label.step, partitions_def is not None)
    return None


def incremental_run(workflow: Workflow, run_config: Mapping[str, Any]) -> bool:
    """Whether a run may have incremental steps: its workflow made one so, or its run config
    turns one on (a resource's files are stamped for those runs only)."""
    if any(settings.get("incremental") for settings in workflow.runtime.values()):
        return True
    todo: List[Any] = [run_config.get("ops") or {}]
    while todo:
        value = todo.pop()
        if isinstance(value, Mapping):
            if (value.get("runtime") or {}).get("incremental") is True:
                return True
            todo.extend(value.values())
    return False


def config_values(cls: type, kwargs: Mapping[str, Any], bound: Mapping[str, str]) -> Dict[str, Any]:
    """A resource's parameters as its run gives them (its defaults for those it leaves unset),
    without the resources bound to it."""
    given = {**declared_defaults(cls), **kwargs}
    return {k: v for k, v in given.items() if k not in bound}


def _resource_version(
    cls: type,
    params: Mapping[str, Any],
    bound: Mapping[str, str],
    run: Any,
    folders: List[str],
    stamped: Mapping[str, Any],
) -> str:
    run_id = run.run_id if run is not None else None
    versions = {p: resource_version(run_id, k) for p, k in bound.items()}
    return version_of(cls, params, versions, folders, stamped, resource=True)


def _resource_def(
    workflow: Workflow,
    node: WorkflowNode,
    resource_keys: Dict[str, str],
    translator: GraphbookTranslator,
    partitions_def: Optional[dg.PartitionsDefinition] = None,
) -> dg.ResourceDefinition:
    fields = param_fields(workflow, node)
    bound = {param: resource_keys[rid] for param, rid in node.resource_params.items()}
    functions = function_params(node)
    # a resource whose value is compiled as code keeps the workflow's values
    locked, why = locked_resource_params(workflow, node)
    functions = {**locked, **functions}
    label = StepRef(workflow.name, node.label or node.name, node.id, kind="resource")
    replaceable = tuple(k for k in overridable(workflow, node) if k not in locked)

    def build(init_context: dg.InitResourceContext) -> Any:
        from ..authoring.log import LogTarget, log_target
        from ..execution import StepFailure

        config = init_context.resource_config or {}
        key = _run_partition(init_context, config, functions, partitions_def, label)
        kwargs = config_kwargs(config, functions, replaceable, label, key, why=why)
        for param, key in bound.items():
            kwargs[param] = getattr(init_context.resources, key)

        run = init_context.dagster_run
        if run is not None and incremental_run(workflow, run.run_config):
            params = config_values(node.cls, kwargs, bound)
            folders = code_folders(node.cls, str(workflow.path) if workflow.path else None)
            record_resource(  # what an incremental step's key takes of this resource: its
                run.run_id,  # files stamped now, before it reads them
                resource_keys[node.id],
                partial(
                    _resource_version, node.cls, params, bound, run, folders,
                    stamps(named_paths(params, folders)),
                ),
            )  # fmt: skip
        emit = log_emitter(init_context.log)
        # a step process joins its run before building (a model load), not only in the op body
        with join_run(init_context.instance, init_context.dagster_run, partial(emit, "warning")):
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
