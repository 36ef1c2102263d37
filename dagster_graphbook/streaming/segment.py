"""A workflow run as one streaming op: a ``multi_asset`` whose outputs are all of its pins.

Which pins store notes: a pin that no step of the segment reads (a sink) goes through the notes
IO manager as in the default mode (stored, Parquet for flat sinks, re-materializable parents for
other jobs). A pin read inside the segment is a ``Nothing`` output: its materialization carries
the counts and figures but stores no notes, which is what keeps memory bounded. The op cannot be
subset: materializing any of its assets runs the whole segment from its sources.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Set, Tuple

import dagster as dg

from ..execution.step_op import RUNTIME_KEY, StepPlan, make_step
from ..io import NOTES_IO_MANAGER_KEY
from ..translator import GraphbookTranslator
from ..workflow import Workflow
from .engine import DEFAULT_QUEUE_ITEMS, StreamingRun, StreamStep

STREAM_KEY = "streaming"


def segment_op_name(workflow: Workflow, translator: GraphbookTranslator) -> str:
    """The streaming op's name (the translator's ``get_stream_op_name``)."""
    return translator.names(workflow).stream_op_name


def stored_pins(workflow: Workflow) -> Set[Tuple[str, str]]:
    """``(node id, pin)`` of the pins that keep their notes: those no step of the segment reads."""
    return {
        (n.id, pin)
        for n in workflow.steps()
        for pin in n.outputs
        if not workflow.children(n.id, pin)
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
    partitions_def: Any = None,
    retry_policy: Any = None,
    op_tags: Optional[Dict[str, Any]] = None,
    external_deps: Optional[List[dg.AssetKey]] = None,
    pool: Optional[str] = None,
) -> dg.AssetsDefinition:
    """One op running every step of ``workflow``; ``plans``/``configs`` are the per-step ones.

    ``pool`` and ``retry_policy`` (the workflow's) apply to the op where set; else the first
    step's ``get_pool`` and the step policy with the most retries (a retry reruns every step).
    """
    from ..assets import input_assets, spec_deps

    stored = stored_pins(workflow)
    all_names = translator.names(workflow)
    outs: Dict[str, dg.AssetOut] = {}
    names: Dict[Tuple[str, str], str] = {}
    internal: Dict[str, Set[dg.AssetKey]] = {}
    extra: Dict[dg.AssetKey, dg.AssetDep] = {}
    for node in workflow.steps():
        step = all_names.steps[node.id]
        ins = input_assets(all_names, workflow, node)
        deps, node_internal = spec_deps(
            step.specs, step.stream_output_names, ins, external_deps or []
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
    op_names = {n.id: all_names.steps[n.id].op_name for n in workflow.steps()}
    op_config = {op_names[n.id]: dg.Field(configs[n.id]) for n in workflow.steps()}
    op_config[STREAM_KEY] = dg.Field(_stream_fields())  # defaults filled in
    resource_keys = {key for plan in plans.values() for key in plan.resource_keys.values()}
    pools = [translator.get_pool(workflow, n) for n in workflow.steps()]
    if retry_policy is None:
        policies = [translator.get_retry_policy(workflow, n) for n in workflow.steps()]
        retry_policy = max(
            (p for p in policies if p is not None), key=lambda p: p.max_retries, default=None
        )

    @dg.multi_asset(
        name=all_names.stream_op_name,
        outs=outs,
        internal_asset_deps=internal,
        deps=list(extra.values()) or None,
        config_schema=op_config,
        required_resource_keys=resource_keys,
        op_tags={
            "graphbook/streaming": "true",
            **(op_tags or {}),
            **all_names.steps_tag(all_names.steps),
        },
        pool=pool if pool is not None else next((p for p in pools if p), None),
        partitions_def=partitions_def,
        retry_policy=retry_policy,
        description=f"Graphbook workflow `{workflow.name}` streamed as one op ({len(plans)} steps)",
        can_subset=False,
    )
    def _segment(
        context,
    ):  # no annotation: `from __future__ import annotations` would turn it into a string
        yield from execute_segment(context, workflow, plans, op_names, names, stored)

    return _segment


def execute_segment(
    context: Any,
    workflow: Workflow,
    plans: Mapping[str, StepPlan],
    op_names: Mapping[str, str],
    names: Mapping[Tuple[str, str], str],
    stored: Set[Tuple[str, str]],
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

    specs: List[StreamStep] = []
    for node in workflow.steps():
        plan = plans[node.id]
        step_config = dict(config.get(op_names[node.id]) or {})
        runtime = dict(step_config.pop(RUNTIME_KEY, None) or {})
        children = {pin: [c.id for c in workflow.children(node.id, pin)] for pin in node.outputs}
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
) -> Dict[str, Any]:
    """Run config written per step op (``ops: {job__Step: {config: ...}}``) for the streaming op;
    ``base`` is run config given whole, whose ``ops`` entries ``config`` may have replaced."""
    ops = {**dict((base or {}).get("ops") or {}), **dict(config.get("ops") or {})}
    if not ops:
        return config
    segment = segment_op_name(workflow, translator)
    nested = dict((ops.pop(segment, None) or {}).get("config") or {})
    for op, body in ops.items():
        nested[op] = {**nested.get(op, {}), **((body or {}).get("config") or {})}
    return {**config, "ops": {segment: {"config": nested}}}
