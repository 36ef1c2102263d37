"""A workflow compiled once: its names, its segment and its ops. A step op is a segment of one
step, a streaming op a segment of several. The one builder (``assets.op_asset``) and the one op
body (``execution.op.step_op.execute_op``) read an ``OpPlan`` and derive nothing again."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

import dagster as dg

from ..errors import StepRef
from ..model import params as ptypes
from ..model.workflow import Workflow, WorkflowError, WorkflowNode
from .checks import BoundCheck, EmptySource, SourceHasNotes, StepCheck
from .gpus import merged_tags
from .job_steps import NOTES_IO_MANAGER_KEY, as_config_value, holds_placeholder
from .options import WorkflowOptions
from .previews import PreviewSettings
from .segments import segment_ids, stored_pins
from .settings import RUNTIME_KEY, STREAM_KEY, runtime_field, stream_field
from .shards import ShardPlan, shard_plan
from .translator import GraphbookTranslator, WorkflowNames
from .trust import code_params

Pin = Tuple[str, str]  # (node id, pin)


@dataclass(frozen=True)
class StepPlan:
    """What an op needs to run one workflow step, fixed at definition time."""

    workflow: str
    workflow_source: str
    node_id: str
    step_name: str
    op_name: str
    cls: type
    kind: str  # source | step | batch
    pins: Tuple[str, ...]
    input_names: Tuple[str, ...]  # the op inputs feeding it, one per edge in edge order
    resource_keys: Mapping[str, str]  # parameter -> Dagster resource key
    function_params: Mapping[str, Optional[str]] = field(default_factory=dict)
    overridable: Tuple[str, ...] = ()
    children: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)  # pin -> steps in op
    preview: PreviewSettings = PreviewSettings()  # image previews of its pins (previews.py)
    # runtime.incremental as its workflow set it: a run turning it off refreshes the store
    incremental: bool = False

    @property
    def label(self) -> StepRef:
        return StepRef(self.workflow, self.step_name, self.node_id)


@dataclass(frozen=True)
class OpPlan:
    """One op: its steps, where their notes go, and the Dagster arguments of its multi-asset."""

    name: str
    steps: Tuple[StepPlan, ...]  # in topological order
    streamed: bool  # a segment: its steps pass notes to each other in one process
    outputs: Mapping[Pin, str]  # (node id, pin) -> Dagster output name
    stored: FrozenSet[Pin]  # pins whose notes go to the notes IO manager
    inlets: Mapping[Pin, Tuple[str, Tuple[str, ...]]]  # streamed: outside pin -> (input, readers)
    checks: Tuple[BoundCheck, ...]
    asset_args: Mapping[str, Any]  # everything else ``dg.multi_asset`` takes
    shard: Optional[ShardPlan] = None  # a sharded batch step: plan, shards and commit (shards.py)
    # where the op's notes go (notes_dir, notes_keep): on its stored pins' specs and on a
    # sharded step's intermediate outputs, which the notes IO manager stores beside them
    storage: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkflowPlan:
    """One workflow, compiled: the translator's names, the streamed segment (node ids, empty in
    the default mode) and the ops, the streaming op first."""

    workflow: Workflow
    names: WorkflowNames
    segment: Tuple[str, ...]
    ops: Tuple[OpPlan, ...]


def compile_workflow(
    workflow: Workflow,
    translator: GraphbookTranslator,
    options: WorkflowOptions = WorkflowOptions(),
    *,
    checks: Optional[Mapping[str, Sequence[StepCheck]]] = None,
    external_deps: Optional[Mapping[str, Sequence[dg.AssetKey]]] = None,
    storage: Optional[Mapping[str, Any]] = None,
) -> WorkflowPlan:
    """Compile ``workflow`` (validated) into its plan, as ``options`` say (its partitions, retry
    policy, op tags, pool, streaming, ``empty_source``); ``checks`` and ``external_deps`` are
    ``options``' bound to node ids, ``storage`` its notes IO manager metadata. Checks on streamed
    steps are refused (a streamed pin may store nothing to check)."""
    names = translator.names(workflow)
    checks, external_deps = checks or {}, external_deps or {}
    segment = segment_ids(workflow, names, options.streaming)
    checked = [names.steps[i].step for i in segment if checks.get(i)]
    if checked:
        raise WorkflowError(
            workflow.source,
            [
                f"asset checks on streamed steps ({', '.join(checked)}) are not supported "
                "yet; leave those steps out of the streaming segment or drop the checks"
            ],
        )
    common: Dict[str, Any] = dict(
        resource_keys=dict(names.resource_keys), options=options, storage=dict(storage or {})
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
    return WorkflowPlan(workflow, names, tuple(segment), tuple(ops))


def compile_op(
    workflow: Workflow,
    translator: GraphbookTranslator,
    segment: Sequence[str],
    *,
    streamed: bool,
    resource_keys: Mapping[str, str],
    options: WorkflowOptions = WorkflowOptions(),
    external_deps: Sequence[dg.AssetKey] = (),
    checks: Sequence[StepCheck] = (),
    storage: Optional[Mapping[str, Any]] = None,
) -> OpPlan:
    """The plan of the op running ``segment`` (node ids in topological order): one step in the
    default mode, or the streamed steps. Its outputs are the steps' pins; a streamed pin that no
    step outside reads stores nothing (a ``Nothing`` output)."""
    names = translator.names(workflow)
    inside = set(segment)
    stored = stored_pins(workflow, segment)
    wiring = _Wiring(names, workflow, inside, streamed, external_deps, dict(storage or {}))
    steps = [wiring.add(workflow.nodes[i], stored, resource_keys) for i in segment]
    nodes = [workflow.nodes[i] for i in segment]
    shards = [
        shard_plan(
            workflow,
            n,
            s.step_name,
            s.op_name,
            streamed=streamed,
            inner_names=functools.partial(translator.get_shard_op_names, workflow, n),
        )  # fmt: skip
        for s, n in zip(steps, nodes)
    ]  # a streamed step asking for shards is refused here
    if streamed:
        name = names.stream_op_name
        config = {
            s.op_name: dg.Field(_step_config(workflow, workflow.nodes[s.node_id])) for s in steps
        }
        config[STREAM_KEY] = stream_field()
        whole = len(segment) == len(workflow.steps())
        what = "" if whole else f" ({', '.join(s.step_name for s in steps)})"
        description = (
            f"Graphbook workflow `{workflow.name}` streamed as one op ({len(segment)} steps{what})"
        )
        tags: Dict[str, Any] = {"graphbook/streaming": "true"}
    else:
        name = steps[0].op_name
        config = _step_config(workflow, nodes[0], shards[0])
        description = translator.get_description(workflow, nodes[0])
        tags = dict(translator.get_op_tags(workflow, nodes[0]))
    partitions_def, retry_policy = options.partitions_def, options.retry_policy
    bound = tuple(_bind(checks, steps[0], names, nodes[0]))
    if not streamed and partitions_def is not None:
        bound += tuple(_source_check(options.empty_source, steps[0], names, nodes[0]))
    pools = (
        [options.pool]
        if options.pool is not None
        else [translator.get_pool(workflow, n) for n in nodes]
    )
    if retry_policy is None:
        policies = [translator.get_retry_policy(workflow, n) for n in nodes]
        retry_policy = max(
            (p for p in policies if p is not None), key=lambda p: p.max_retries, default=None
        )
    function_params = {s.node_id: s.function_params for s in steps}
    asset_args = dict(
        name=name,
        outs=wiring.outs,
        ins=wiring.ins,
        internal_asset_deps=wiring.internal,
        deps=wiring.deps(),
        config_schema=config,
        required_resource_keys={k for s in steps for k in s.resource_keys.values()},
        op_tags=merged_tags(
            tags,
            options.op_tags,
            names.steps_tag(
                list(segment),
                function_params,
                {n.id: _resources_used(workflow, names, n) for n in nodes},
            ),
        ),
        pool=next((p for p in pools if p), None),
        partitions_def=partitions_def,
        retry_policy=retry_policy,
        description=description,
        can_subset=False,
        check_specs=[b.spec(partitions_def) for b in bound] or None,
    )
    return OpPlan(
        name, tuple(steps), streamed, dict(wiring.out_names), frozenset(stored),
        dict(wiring.inlets), bound, asset_args, None if streamed else shards[0],
        dict(storage or {}),
    )  # fmt: skip


class _Wiring:
    """The op's Dagster inputs, outputs and deps, built step by step."""

    def __init__(
        self,
        names: WorkflowNames,
        workflow: Workflow,
        inside: Set[str],
        streamed: bool,
        external: Sequence[dg.AssetKey],
        storage: Mapping[str, Any],
    ):
        self.names, self.workflow, self.inside, self.streamed = names, workflow, inside, streamed
        self.storage = storage
        self.external = list(external)
        self.outs: Dict[str, dg.AssetOut] = {}
        self.out_names: Dict[Pin, str] = {}
        self.ins: Dict[str, dg.AssetIn] = {}
        self.inlets: Dict[Pin, Tuple[str, Tuple[str, ...]]] = {}
        self.internal: Dict[str, Set[dg.AssetKey]] = {}
        self.extra: Dict[dg.AssetKey, dg.AssetDep] = {}

    def add(
        self, node: WorkflowNode, stored: Set[Pin], resource_keys: Mapping[str, str]
    ) -> StepPlan:
        step = self.names.steps[node.id]
        node_ins = input_assets(self.names, self.workflow, node)
        input_names = []
        for (src, pin), asset_in in zip(node.inputs, node_ins.values()):
            if src in self.inside:
                continue  # streamed from a step of the op
            if self.streamed and (src, pin) in self.inlets:
                continue  # one input per outside pin, whichever steps read it
            input_name = f"in_{len(self.ins)}"
            self.ins[input_name] = asset_in
            input_names.append(input_name)
            if self.streamed:
                readers = [c.id for c in self.workflow.children(src, pin) if c.id in self.inside]
                self.inlets[(src, pin)] = (input_name, tuple(readers))
        out_names = step.stream_output_names if self.streamed else step.output_names
        deps, internal = spec_deps(step.specs, out_names, node_ins, self.external)
        self.extra.update((d.asset_key, d) for d in deps)
        self.internal.update(internal)
        for pin, spec in step.specs.items():
            name = self.out_names[(node.id, pin)] = out_names[pin]
            spec = spec.replace_attributes(deps=[]).merge_attributes(metadata=self.storage)
            if (node.id, pin) in stored:
                self.outs[name] = dg.AssetOut.from_spec(spec, io_manager_key=NOTES_IO_MANAGER_KEY)
            else:
                spec = spec.merge_attributes(metadata={"dagster_graphbook/streamed": True})
                self.outs[name] = dg.AssetOut.from_spec(spec, dagster_type=dg.Nothing)
        children = {
            pin: tuple(c.id for c in self.workflow.children(node.id, pin) if c.id in self.inside)
            for pin in node.outputs
        }
        return StepPlan(
            workflow=self.workflow.name,
            workflow_source=self.workflow.source,
            node_id=node.id,
            step_name=step.step,
            op_name=step.op_name,
            cls=node.cls,
            kind=node.step_kind,
            pins=tuple(node.outputs),
            input_names=tuple(input_names),
            resource_keys={p: resource_keys[r] for p, r in node.resource_params.items()},
            function_params=function_params(node),
            overridable=overridable(self.workflow, node),
            children=children,
            preview=self.workflow.previews.get(node.id, PreviewSettings()),
            incremental=bool(self.workflow.runtime.get(node.id, {}).get("incremental", False)),
        )

    def deps(self) -> Optional[List[dg.AssetDep]]:
        """Non-data deps: those of the steps, less the assets the op reads as inputs."""
        inputs = {i.key for i in self.ins.values()}
        return [d for k, d in self.extra.items() if k not in inputs] or None


def _resources_used(workflow: Workflow, names: WorkflowNames, node: WorkflowNode) -> List[str]:
    """The resource keys a step uses, and those its resources use (a resource bound to another
    resource's parameter), for ``--set RESOURCE.PARAM`` on a code location's job."""
    seen: List[str] = []
    todo = list(node.resource_params.values())
    while todo:
        resource = todo.pop()
        if resource not in seen:
            seen.append(resource)
            todo.extend(workflow.nodes[resource].resource_params.values())
    return [names.resource_keys[r] for r in seen]


def _step_config(
    workflow: Workflow, node: WorkflowNode, shard: Optional[ShardPlan] = None
) -> Dict[str, Any]:
    """A step's launchpad fields: its parameters and its ``runtime`` block, whose defaults are
    what its workflow set (``runtime=``; a sharded step's ``shards``/``shard_size``)."""
    defaults = {
        **workflow.runtime.get(node.id, {}),  # the workflow's runtime= for this step
        **(shard.runtime_defaults() if shard is not None else {}),
    }
    return {**param_fields(workflow, node), RUNTIME_KEY: runtime_field(node.step_kind, defaults)}


def _bind(
    checks: Sequence[StepCheck], step: StepPlan, names: WorkflowNames, node: WorkflowNode
) -> List[BoundCheck]:
    bound = []
    for check in checks:
        pin = check.pin or node.outputs[0]
        bound.append(BoundCheck(check, names.steps[node.id].key(pin), pin, step.label))
    return bound


def _source_check(
    empty_source: EmptySource, step: StepPlan, names: WorkflowNames, node: WorkflowNode
) -> List[BoundCheck]:
    """A source step's ``SourceHasNotes`` (on its first pin's asset), unless ``ignore``."""
    if empty_source == "ignore" or node.step_kind != "source":
        return []
    pin = node.outputs[0]
    key = names.steps[node.id].key(pin)
    return [SourceHasNotes(empty_source, step.step_name, key, pin, step.label)]


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
        if value is None:
            # the class's __init__ default: a run fills its {partition_key} (passed as a kwarg,
            # filled) and a run without a key is refused, as for a workflow's value
            own = ptypes.default_value(node.cls, key, spec)
            value = as_config_value(own) if holds_placeholder(own) else None
        fields[key] = ptypes.config_field(spec, value, has_default=value is not None)
    return fields


def function_params(node: WorkflowNode) -> Dict[str, Optional[str]]:
    """The workflow's value of each parameter the step compiles (see ``trust.code_params``)."""
    code = code_params(node)
    return {
        k: node.values.get(k, s.get("default"))
        for k, s in node.parameters.items()
        if k in code and k not in node.resource_params
    }


def overridable(workflow: Workflow, node: WorkflowNode) -> tuple:
    """Function parameters whose code run config may replace: marked in the workflow file, or by
    ``GraphbookWorkflow``."""
    return tuple(sorted({*workflow.overridable_functions, *node.overridable}))


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
    inputs = {i.key for i in ins.values() if i.key is not None}  # input_assets sets every key
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
