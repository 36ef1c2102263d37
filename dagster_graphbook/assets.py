"""A workflow as Dagster definitions: one multi-asset op per step (one asset per output pin),
one resource per resource node, one job selecting all of the workflow's assets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import dagster as dg

from .checks import StepCheck, with_checks
from .dead_runs import join_run
from .errors import StepRef
from .execution.step_op import config_kwargs, execute_op
from .plan.ops import OpPlan, compile_op, function_params, overridable, param_fields
from .streaming.advice import warn_heavy_outputs
from .streaming.segment import segment_ids
from .translator import GraphbookTranslator, WorkflowNames
from .trust import locked_resource_params
from .workflow import Workflow, WorkflowError, WorkflowNode


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
    translator = translator or GraphbookTranslator()
    names = translator.names(workflow)
    resource_keys = dict(names.resource_keys)
    resources = {
        resource_keys[n.id]: _resource_def(workflow, n, resource_keys, translator)
        for n in workflow.resources()
    }
    checks, external_deps = checks or {}, external_deps or {}
    segment = segment_ids(workflow, names, streaming)
    checked = [names.steps[i].step for i in segment if checks.get(i)]
    if checked:
        raise WorkflowError(
            workflow.source,
            [
                f"asset checks on streamed steps ({', '.join(checked)}) are not supported "
                "yet; leave those steps out of the streaming segment or drop the checks"
            ],
        )
    common = dict(
        resource_keys=resource_keys,
        partitions_def=partitions_def,
        retry_policy=retry_policy,
        op_tags=op_tags,
        pool=pool,
    )
    ops = [
        compile_op(
            workflow,
            translator,
            [node.id],
            streamed=False,
            external_deps=external_deps.get(node.id, []),
            checks=checks.get(node.id, []),
            **common,
        )  # fmt: skip
        for node in workflow.steps()
        if node.id not in segment
    ]
    if segment:
        deps = sorted({k for i in segment for k in external_deps.get(i, [])}, key=str)
        ops.insert(
            0,
            compile_op(workflow, translator, segment, streamed=True, external_deps=deps, **common),
        )
    assets = [op_asset(op) for op in ops]
    keys = [key for asset in assets for key in asset.keys]
    job = dg.define_asset_job(
        names.job_name,
        selection=dg.AssetSelection.assets(*keys),
        description=translator.get_job_description(workflow),
        tags=job_tags,
        executor_def=executor_def,
    )
    return WorkflowDefs(workflow, assets, resources, job, keys, names)


def op_asset(op: OpPlan) -> dg.AssetsDefinition:
    """The one builder: a ``multi_asset`` over the op's pins whose body is ``execute_op``, for a
    step op and a streaming op alike."""
    pin_of = {name: pin for (_, pin), name in op.outputs.items()}
    label = op.steps[0].label

    @dg.multi_asset(**op.asset_args)
    def _op(context, **inputs):  # no annotation: `from __future__ import annotations` -> a string
        with join_run(context.instance, context.run_id):
            outputs = execute_op(context, op, inputs)
            if not op.streamed:  # a streamed op stores no tensors between its steps
                outputs = warn_heavy_outputs(context, label, outputs)
            yield from with_checks(outputs, op.checks, pin_of)

    return _op


def _resource_def(
    workflow: Workflow,
    node: WorkflowNode,
    resource_keys: Dict[str, str],
    translator: GraphbookTranslator,
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
        from .authoring.log import LogTarget, log_target
        from .execution.errors import StepFailure

        config = init_context.resource_config or {}
        kwargs = config_kwargs(config, functions, replaceable, label, why=why)
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
