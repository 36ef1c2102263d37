"""A segment of a workflow run as one streaming op: a ``multi_asset`` whose outputs are the pins
of the segment's steps.

The segment is the whole workflow (``streaming=True``) or the steps a list names (a connected
part; the other steps keep an op each). Pins of steps outside the segment that a segment step
reads are the op's inputs, loaded through the notes IO manager and fed into the stream by an
inlet, one note at a time, as a source would.

Which pins store notes: a pin that no step of the segment reads (a sink, or a pin only steps
outside the segment read) goes through the notes IO manager as in the default mode (stored,
Parquet for flat sinks, re-materializable parents for other jobs). A pin read only inside the
segment is a ``Nothing`` output: its materialization carries the counts and figures but stores
no notes, which is what keeps memory bounded. The op cannot be subset: materializing any of its
assets runs the whole segment from its sources and inputs.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union

import dagster as dg

from ..dead_runs import join_run
from ..execution.step_op import RUNTIME_KEY, StepPlan, make_step
from ..io import NOTES_IO_MANAGER_KEY
from ..translator import GraphbookTranslator, WorkflowNames
from ..workflow import Workflow, WorkflowError
from .engine import DEFAULT_QUEUE_ITEMS, Inlet, StreamingRun, StreamStep

STREAM_KEY = "streaming"
# True: every step in one op; a list of step names (or labels, node ids): those steps
Streaming = Union[bool, Sequence[str]]


def segment_ids(workflow: Workflow, names: WorkflowNames, streaming: Streaming) -> List[str]:
    """The node ids of the streamed segment in topological order (``[]``: no streaming).

    A named segment must be connected, and no path may leave it and come back (the op outside
    would need the segment's output before the segment could run): both fail at load, naming
    the steps."""
    if streaming is True:
        return [n.id for n in workflow.steps()]
    if not streaming:
        return []
    wanted = [streaming] if isinstance(streaming, str) else list(streaming)
    refs = names.step_refs()
    unknown = [r for r in wanted if not isinstance(r, str) or r not in refs]
    if unknown:
        steps = ", ".join(s.step for s in names.steps.values())
        raise WorkflowError(
            workflow.source,
            [f"streaming names {unknown!r}, not steps of the workflow (steps: {steps})"],
        )
    chosen = {refs[r].node_id for r in wanted}
    ids = [n.id for n in workflow.steps() if n.id in chosen]
    step_of = {i: f"'{s.step}' (node {i})" for i, s in names.steps.items()}
    problem = _disconnected(workflow, ids, step_of) or _re_entered(workflow, chosen, step_of)
    if problem:
        raise WorkflowError(workflow.source, [f"streaming segment: {problem}"])
    return ids


def _disconnected(workflow: Workflow, ids: List[str], step_of: Mapping[str, str]) -> str:
    """Why the segment is not one connected part ('' when it is)."""
    chosen = set(ids)
    links: Dict[str, Set[str]] = {i: set() for i in ids}
    for i in ids:
        for src, _ in workflow.nodes[i].inputs:
            if src in chosen:
                links[i].add(src)
                links[src].add(i)
    seen, todo = {ids[0]}, [ids[0]]
    while todo:
        for other in links[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    apart = [step_of[i] for i in ids if i not in seen]
    if not apart:
        return ""
    return (
        f"steps {', '.join(apart)} are not connected to step {step_of[ids[0]]} through steps "
        "of the segment; stream connected steps (or give each part a workflow of its own)"
    )


def _re_entered(workflow: Workflow, chosen: Set[str], step_of: Mapping[str, str]) -> str:
    """A path that leaves the segment and comes back into it ('' when there is none)."""
    children: Dict[str, List[str]] = {}
    for node in workflow.steps():
        for src, _ in node.inputs:
            children.setdefault(src, []).append(node.id)
    came_from: Dict[str, str] = {}  # outside step -> the segment step it is reached from
    todo = [(c, s) for s in chosen for c in children.get(s, []) if c not in chosen]
    while todo:
        node_id, start = todo.pop()
        if node_id in came_from:
            continue
        came_from[node_id] = start
        for child in children.get(node_id, []):
            if child in chosen:
                return (
                    f"step {step_of[node_id]} is outside the segment but reads from step "
                    f"{step_of[start]} and feeds step {step_of[child]} inside it; "
                    f"add it to the segment"
                )
            todo.append((child, start))
    return ""


def segment_op_name(workflow: Workflow, translator: GraphbookTranslator) -> str:
    """The streaming op's name (the translator's ``get_stream_op_name``)."""
    return translator.names(workflow).stream_op_name


def stored_pins(workflow: Workflow, segment: Sequence[str]) -> Set[Tuple[str, str]]:
    """``(node id, pin)`` of the segment's pins that keep their notes: those no step reads, or
    that a step outside the segment reads."""
    inside = set(segment)
    return {
        (node_id, pin)
        for node_id in segment
        for pin in workflow.nodes[node_id].outputs
        if not workflow.children(node_id, pin)
        or any(c.id not in inside for c in workflow.children(node_id, pin))
    }


def _stream_fields() -> Dict[str, dg.Field]:
    return {
        "queue_items": dg.Field(
            int,
            default_value=DEFAULT_QUEUE_ITEMS,
            description="items a batch step collects before it runs; the source waits "
            "meanwhile (bounds memory)",
        ),
        "progress_interval_s": dg.Field(
            float,
            default_value=5.0,
            description="seconds between per-step progress lines in the event log",
        ),
    }


def segment_asset(
    workflow: Workflow,
    translator: GraphbookTranslator,
    plans: Mapping[str, StepPlan],
    configs: Mapping[str, Dict[str, dg.Field]],
    *,
    segment: Optional[Sequence[str]] = None,
    partitions_def: Any = None,
    retry_policy: Any = None,
    op_tags: Optional[Dict[str, Any]] = None,
    external_deps: Optional[List[dg.AssetKey]] = None,
    pool: Optional[str] = None,
) -> dg.AssetsDefinition:
    """One op running the steps ``segment`` (node ids, default every step) of ``workflow``;
    ``plans``/``configs`` are the per-step ones.

    ``pool`` and ``retry_policy`` (the workflow's) apply to the op where set; else the first
    step's ``get_pool`` and the step policy with the most retries (a retry reruns every step).
    """
    from ..assets import input_assets, spec_deps

    segment = list(segment) if segment is not None else [n.id for n in workflow.steps()]
    nodes = [workflow.nodes[i] for i in segment]
    inside = set(segment)
    stored = stored_pins(workflow, segment)
    all_names = translator.names(workflow)
    outs: Dict[str, dg.AssetOut] = {}
    names: Dict[Tuple[str, str], str] = {}
    internal: Dict[str, Set[dg.AssetKey]] = {}
    extra: Dict[dg.AssetKey, dg.AssetDep] = {}
    ins: Dict[str, dg.AssetIn] = {}  # pins of steps outside the segment that it reads
    inlets: Dict[Tuple[str, str], str] = {}  # (node id, pin) outside -> input name
    for node in nodes:
        step = all_names.steps[node.id]
        node_ins = input_assets(all_names, workflow, node)
        for (src, pin), asset_in in zip(node.inputs, node_ins.values()):
            if src not in inside and (src, pin) not in inlets:
                inlets[(src, pin)] = f"in_{len(ins)}"
                ins[inlets[(src, pin)]] = asset_in
        deps, node_internal = spec_deps(
            step.specs, step.stream_output_names, node_ins, external_deps or []
        )
        extra.update((d.asset_key, d) for d in deps)
        internal.update(node_internal)
        for pin, spec in step.specs.items():
            name = names[(node.id, pin)] = step.stream_output_names[pin]
            spec = spec.replace_attributes(deps=[])
            if (node.id, pin) in stored:
                outs[name] = dg.AssetOut.from_spec(spec, io_manager_key=NOTES_IO_MANAGER_KEY)
            else:
                spec = spec.merge_attributes(metadata={"dagster_graphbook/streamed": True})
                outs[name] = dg.AssetOut.from_spec(spec, dagster_type=dg.Nothing)
    for key in {i.key for i in ins.values()}:
        extra.pop(key, None)
    op_names = {n.id: all_names.steps[n.id].op_name for n in nodes}
    op_config = {op_names[n.id]: dg.Field(configs[n.id]) for n in nodes}
    op_config[STREAM_KEY] = dg.Field(_stream_fields())  # defaults filled in
    resource_keys = {key for i in segment for key in plans[i].resource_keys.values()}
    pools = [translator.get_pool(workflow, n) for n in nodes]
    if retry_policy is None:
        policies = [translator.get_retry_policy(workflow, n) for n in nodes]
        retry_policy = max(
            (p for p in policies if p is not None), key=lambda p: p.max_retries, default=None
        )
    whole = len(segment) == len(workflow.steps())
    what = "" if whole else f" ({', '.join(all_names.steps[i].step for i in segment)})"

    @dg.multi_asset(
        name=all_names.stream_op_name,
        outs=outs,
        ins=ins,
        internal_asset_deps=internal,
        deps=list(extra.values()) or None,
        config_schema=op_config,
        required_resource_keys=resource_keys,
        op_tags={
            "graphbook/streaming": "true",
            **(op_tags or {}),
            **all_names.steps_tag(segment, {i: plans[i].function_params for i in segment}),
        },
        pool=pool if pool is not None else next((p for p in pools if p), None),
        partitions_def=partitions_def,
        retry_policy=retry_policy,
        description=f"Graphbook workflow `{workflow.name}` streamed as one op "
        f"({len(segment)} steps{what})",
        can_subset=False,
    )
    def _segment(
        context, **inputs
    ):  # no annotation: `from __future__ import annotations` would turn it into a string
        feeds = {where: inputs[name] for where, name in inlets.items()}
        with join_run(context.instance, context.run_id):
            yield from execute_segment(
                context, workflow, segment, plans, op_names, names, stored, feeds
            )

    return _segment


def _inlet_specs(
    workflow: Workflow, segment: Sequence[str], feeds: Mapping[Tuple[str, str], List[Any]]
) -> List[StreamStep]:
    """A source-like step per pin from outside the segment, sending its stored notes to the
    segment steps that read it (in edge order)."""
    inside = set(segment)
    specs = []
    for (src, pin), notes in feeds.items():
        readers = [c.id for c in workflow.children(src, pin) if c.id in inside]
        node = workflow.nodes[src]
        label = f"input {node.label or node.name}.{pin} (node {src})"
        specs.append(
            StreamStep(
                node_id=f"{src}:{pin}",
                name=label,
                label=label,
                kind="source",
                step=Inlet(notes or []),
                pins=("out",),
                children={"out": readers},
            )
        )
    return specs


def execute_segment(
    context: Any,
    workflow: Workflow,
    segment: Sequence[str],
    plans: Mapping[str, StepPlan],
    op_names: Mapping[str, str],
    names: Mapping[Tuple[str, str], str],
    stored: Set[Tuple[str, str]],
    feeds: Optional[Mapping[Tuple[str, str], List[Any]]] = None,
) -> Iterator[dg.Output]:
    """Build every step, stream, then one Output per pin (notes only for stored pins)."""
    from ..execution.batch import BatchSettings
    from ..execution.step_metadata import step_metadata

    config = dict(context.op_execution_context.op_config or {})
    stream = dict(config.pop(STREAM_KEY, None) or {})

    def emit(level: str, message: str) -> None:
        getattr(context.log, level if level in ("info", "warning", "error", "debug") else "info")(
            message
        )

    inside = set(segment)
    specs: List[StreamStep] = _inlet_specs(workflow, segment, feeds or {})
    for node in (workflow.nodes[i] for i in segment):
        plan = plans[node.id]
        step_config = dict(config.get(op_names[node.id]) or {})
        runtime = dict(step_config.pop(RUNTIME_KEY, None) or {})
        children = {
            pin: [c.id for c in workflow.children(node.id, pin) if c.id in inside]
            for pin in node.outputs
        }
        specs.append(
            StreamStep(
                node_id=node.id,
                name=plan.step_name,
                label=plan.label,
                kind=plan.kind,
                step=make_step(context, plan, step_config),
                pins=plan.pins,
                children=children,
                stored={p for p in plan.pins if (node.id, p) in stored},
                on_item_error=runtime.get("on_item_error", "raise"),
                batch_settings=BatchSettings.from_config(runtime) if plan.kind == "batch" else None,
            )
        )
    run = StreamingRun(
        specs,
        emit,
        queue_items=int(stream.get("queue_items", DEFAULT_QUEUE_ITEMS)),
        progress_interval_s=float(stream.get("progress_interval_s", 5.0)),
    )
    nodes = run.run()
    for spec in specs:
        if spec.node_id not in inside:
            continue  # an inlet: its notes are another op's output
        node = nodes[spec.node_id]
        for error in node.stats.errors:
            context.log.warning(f"{spec.label}: skipped {error.headline()}")
        stats = {
            "notes_in": node.stats.notes_in,
            "seconds": round(node.stats.seconds, 4),
            **node.stats.batch,
            "max_notes_queued": run.max_queued,
        }
        if spec.kind == "source":
            del stats["notes_in"]  # a source reads no notes: no flat curve of zeros
        figures = dict(getattr(spec.step, "dagster_metadata", None) or {})
        meta = step_metadata(stats, node.stats.files, node.stats.errors, figures)
        for pin in spec.pins:
            pin_meta = {  # a pin's count, stored or not (the IO manager sets the same when stored)
                **meta,
                "dagster/row_count": dg.MetadataValue.int(node.stats.pins.get(pin, 0)),
                "stored": dg.MetadataValue.bool(pin in spec.stored),
            }
            value = node.kept[pin] if pin in spec.stored else None
            yield dg.Output(value, output_name=names[(spec.node_id, pin)], metadata=pin_meta)


def nest_step_config(
    config: Dict[str, Any],
    workflow: Workflow,
    translator: GraphbookTranslator,
    base: Optional[Mapping[str, Any]] = None,
    streaming: Streaming = True,
) -> Dict[str, Any]:
    """Run config written per step op (``ops: {job__Step: {config: ...}}``) for the streaming op:
    the entries of the segment's steps move under it, the others stay. ``base`` is run config
    given whole, whose ``ops`` entries ``config`` may have replaced."""
    ops = {**dict((base or {}).get("ops") or {}), **dict(config.get("ops") or {})}
    if not ops:
        return config
    names = translator.names(workflow)
    inside = {names.steps[i].op_name for i in segment_ids(workflow, names, streaming)}
    segment = segment_op_name(workflow, translator)
    nested = dict((ops.pop(segment, None) or {}).get("config") or {})
    for op in [op for op in ops if op in inside]:
        body = ops.pop(op)
        nested[op] = {**nested.get(op, {}), **((body or {}).get("config") or {})}
    return {**config, "ops": {**ops, segment: {"config": nested}}}
