"""The one op body: config and resources -> step instances -> drivers (all notes at once, or
streamed through the scheduler) -> one Output per pin.

A step op is a segment of one step; a streaming op a segment of several. Both run here.
"""

from __future__ import annotations

import heapq
import itertools
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, cast

import dagster as dg

from ...authoring.log import Emit
from ...errors import Label
from ...plan.job_steps import fill_placeholder, placeholder_message, unfilled_placeholders
from ...plan.plan import OpPlan, StepPlan
from ...plan.settings import (
    RUNTIME_KEY,
    STREAM_KEY,
    BatchRuntime,
    StepRuntime,
    StreamSettings,
    read_runtime,
)
from ...store.incremental import IncrementalStore
from ...store.previews import (
    PREVIEW_META,
    contact_sheet,
    opening_store_urls,
    store_protocols,
)
from ..errors import ItemError, StepFailure
from ..incremental.keys import (
    Unkeyable,
    code_folders,
    declared_defaults,
    resource_version,
    version_of,
)
from ..incremental.reuse import REFRESH_TAG, Reuse
from ..ownership.guard import check_code_config, check_partition_key
from ..pools.workers import die_with_the_run
from ..routing import PinNotes, StepResult, dropped_stats
from ..step.driver import StepDriver, run_all
from ..step.stream import StreamingRun, StreamStep
from .step_metadata import step_metadata


def config_kwargs(
    config: Mapping[str, Any],
    function_params: Mapping[str, Optional[str]],
    overridable: Tuple[str, ...],
    label: Label,
    partition_key: Optional[str] = None,
    why: Optional[Dict[str, str]] = None,
) -> Dict[str, Any]:
    """Constructor kwargs from op or resource config; refuses run config that replaces code.

    ``{partition_key}`` is filled into string parameters, never into code (function parameters).
    """
    check_code_config(dict(config), dict(function_params), overridable, label, why)
    kwargs: Dict[str, Any] = {}
    for key, value in config.items():
        if partition_key is not None and key not in function_params:
            value = fill_placeholder(value, partition_key)
        if value is not None:
            kwargs[key] = value
    return kwargs


def refuse_unfilled(
    config: Mapping[str, Any],
    code_params: Iterable[str],
    label: Label,
    name: str,
    partitioned: bool,
) -> None:
    """Refuse a step's or resource's config (``name``: its ``STEP``) whose parameters hold a
    ``{partition_key}`` that a run with no key cannot fill: a literal '{partition_key}' path
    would be FileNotFoundError later, or a wrong folder."""
    unfilled = unfilled_placeholders(config, code_params)
    if unfilled:
        found = {f"{name}.{k}": v for k, v in unfilled.items()}
        raise StepFailure(label, placeholder_message(found, partitioned), allow_retries=False)


def step_partition_key(context: dg.AssetExecutionContext, plan: StepPlan) -> Optional[str]:
    """The run's partition key, checked against the asset's partitions (None when unpartitioned)."""
    partitions_def = context.assets_def.partitions_def
    tagged = context.run.tags.get("dagster/partition")
    if partitions_def is not None:
        if not context.has_partition_key:
            return None  # a partition range run: no single key to fill in
        key = context.partition_key
    elif tagged is not None:
        key = tagged
    else:
        return None
    return check_partition_key(key, partitions_def, context.instance, plan.label)


def make_step(
    context: dg.AssetExecutionContext,
    plan: StepPlan,
    config: Dict[str, Any],
    partition_key: Optional[str],
    resources: Any = None,
) -> Any:
    """The step instance from its op config (parameters, the run's checked partition key:
    ``step_partition_key``) and resources (``context.resources``, or those a shard op built
    itself: ``resources``)."""
    if partition_key is None:
        partitioned = context.assets_def.partitions_def is not None
        refuse_unfilled(config, plan.function_params, plan.label, plan.step_name, partitioned)
    kwargs = config_kwargs(
        config, plan.function_params, plan.overridable, plan.label, partition_key
    )
    for key, resource_key in plan.resource_keys.items():
        kwargs[key] = getattr(resources or context.resources, resource_key)
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
def failures_named(label: Optional[Label]) -> Iterator[None]:
    """Every error of a step op ends as a ``StepFailure`` naming its workflow, step and node: a
    ``dg.Failure``, so its headline (not "Error occurred while executing op") leads the run page.
    (``label`` None: a streaming op, whose steps' failures name themselves.)"""
    try:
        yield
    except (dg.DagsterError, dg.RetryRequested, dg.Failure):
        raise  # Dagster's own control flow, and failures that already carry their message
    except Exception as exc:
        if label is None:
            raise
        error = ItemError("step", -1, None, "", "", traceback.format_exc())
        raise StepFailure(label, f"{type(exc).__name__}: {exc}", error) from exc


def _retry_or_raise(
    context: dg.AssetExecutionContext, op: OpPlan, runtimes: List[StepRuntime], exc: Exception
) -> None:
    """``runtime.retries`` from run config (a streaming op: its steps' most): ask Dagster to run
    the op again; once spent, the op fails with ``exc`` itself."""
    runtime = max(runtimes, key=lambda r: r.retries)
    attempt = context.retry_number + 1
    if attempt > runtime.retries or not getattr(exc, "allow_retries", True):
        return  # spent, or a failure that says a retry would fail alike (GPU out of memory)
    label = op.steps[0].label if not op.streamed else f"streaming op {op.name}"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    first = first.removeprefix(f"{label}: ")  # a StepFailure's headline names the step already
    context.log.warning(
        f"{label}: attempt {attempt} of {runtime.retries + 1} failed: {first}; retrying"
    )
    raise dg.RetryRequested(
        max_retries=runtime.retries, seconds_to_wait=runtime.retry_delay_s
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
        pinned = cast(List[PinNotes], streams)  # each has an order (a step's pins)
        tagged = heapq.merge(
            *[zip(s.order, range(len(s)), [k] * len(s)) for k, s in enumerate(pinned)]
        )
        return [streams[k][i] for _, i, k in tagged]
    turns = itertools.zip_longest(*streams, fillvalue=_GAP)
    return [n for turn in turns for n in turn if n is not _GAP]


_GAP = object()


@dataclass
class OpRun:
    """What running an op's steps gave, by node id: each step's result and its own figures (its
    ``dagster_metadata`` once it ended). A shard op returns one; the commit op merges them."""

    results: Dict[str, StepResult]
    figures: Dict[str, Dict[str, Any]]


def execute_op(
    context: dg.AssetExecutionContext, op: OpPlan, inputs: Mapping[str, List[Any]]
) -> Iterator[dg.Output]:
    """Build the op's steps from their config, run them, and yield one Output per pin."""
    yield from emit_outputs(context, op, run_op(context, op, inputs))


def op_config(context: Any) -> Dict[str, Any]:
    """The op's config (a sharded step's inner ops get the step's whole config)."""
    return dict(context.op_execution_context.op_config or {})


def run_op(
    context: dg.AssetExecutionContext,
    op: OpPlan,
    inputs: Mapping[str, List[Any]],
    *,
    notes: Optional[List[Any]] = None,
    first_note: int = 0,
    resources: Any = None,
) -> OpRun:
    """Build the op's steps from their config and run them (the part of ``execute_op`` a shard
    op runs alone): ``notes`` are a shard's slice of the step's input notes (instead of
    ``inputs``), the first of them the step's note ``first_note``; ``max_skipped_fraction`` is
    then the commit's to check, on the whole step's share; ``resources``: the shard's own
    (``shards.shard_resources``)."""
    die_with_the_run()
    config = op_config(context)
    emit = log_emitter(context.log)
    drivers: Dict[str, StepDriver] = {}
    shared = shared_notes(op)
    for plan in op.steps:
        step_config = dict((config.get(plan.op_name) if op.streamed else config) or {})
        with failures_named(plan.label):
            defaults = op.shard.runtime_defaults() if op.shard else None
            runtime = read_runtime(plan.kind, step_config.pop(RUNTIME_KEY, None), defaults)
            _check_not_sharded(op, plan, runtime)
            if notes is not None and isinstance(runtime, BatchRuntime):  # a shard: the commit
                runtime = runtime.model_copy(update={"max_skipped_fraction": None})  # checks it
            partition_key = step_partition_key(context, plan)
            step = make_step(context, plan, step_config, partition_key, resources)
            reuse = incremental_reuse(
                context, op, plan, runtime, step_config, partition_key, emit, shared
            )
        drivers[plan.node_id] = StepDriver(
            step, plan.kind, runtime, pins=plan.pins, label=plan.label,
            node=(plan.node_id, plan.step_name), emit=emit, chunked=op.streamed,
            first_note=first_note, reuse=reuse,
        )  # fmt: skip
    protocols = store_protocols(_notes_dir(context, op))  # a failed item's picture may open
    with failures_named(None if op.streamed else op.steps[0].label), opening_store_urls(protocols):
        try:
            if op.streamed:
                stream = StreamSettings(**dict(config.get(STREAM_KEY) or {}))
                results = _run_streamed(op, drivers, inputs, stream, emit)
            else:
                results = _run_alone(op, drivers, inputs, notes)
        except Exception as exc:
            _retry_or_raise(context, op, [d.runtime for d in drivers.values()], exc)
            raise
    figures = {  # e.g. accuracy, plotted
        node_id: dict(getattr(d.step, "dagster_metadata", None) or {})
        for node_id, d in drivers.items()
    }
    return OpRun(results, figures)


def incremental_reuse(
    context: dg.AssetExecutionContext,
    op: OpPlan,
    plan: StepPlan,
    runtime: StepRuntime,
    params: Mapping[str, Any],
    partition_key: Optional[str],
    emit: Emit,
    shared: Optional[str] = None,
) -> Optional[Reuse]:
    """An incremental step's store of earlier runs' outputs (None: the step computes all its
    notes, as without the setting). A run turning ``incremental`` off on a step its workflow
    made incremental, or tagged ``dagster-graphbook/incremental: refresh`` (``--full``),
    recomputes every note and refreshes the store."""
    wanted = bool(getattr(runtime, "incremental", False))  # a source has no such setting
    if plan.kind == "source" or not (wanted or plan.incremental):
        return None
    if shared is not None:
        emit("warning", f"{plan.label}: incremental is off in this stream: {shared}")
        return None
    refresh = not wanted or context.run.tags.get(REFRESH_TAG) == "refresh"
    given = {  # what the step got: its defaults for what the run left unset (None, as
        # make_step passes it), {partition_key} filled
        **{k: v for k, v in declared_defaults(plan.cls).items() if k not in plan.resource_keys},
        **{k: v for k, v in params.items() if v is not None},
    }
    filled = {  # filled into its parameters (not into code)
        k: v if partition_key is None or k in plan.function_params
        else fill_placeholder(v, partition_key)
        for k, v in given.items()
    }  # fmt: skip
    folders = code_folders(plan.cls, plan.workflow_source)
    try:
        bound = {p: resource_version(context.run_id, k) for p, k in plan.resource_keys.items()}
        token = version_of(plan.cls, {**filled, "partition key": partition_key}, bound, folders)
    except Unkeyable as exc:
        emit("warning", f"{plan.label}: incremental: {exc}; every note is computed")
        return None
    store = IncrementalStore(
        _notes_dir(context, op), plan.workflow, plan.step_name, partition_key, token
    )
    return Reuse(
        store, token, refresh=refresh, label=plan.label,
        warn=lambda m: emit("warning", m), info=lambda m: emit("info", m), run_id=context.run_id,
    )  # fmt: skip


def shared_notes(op: OpPlan) -> Optional[str]:
    """Why a stream's steps cannot reuse notes (None: they can). A streamed note that reaches two
    steps of the stream (a pin two steps read, or two pins one step reads) is one dict that
    each may change, and a full run's notes carry both changes; a reused note is a copy of its
    own, so the stream would give other notes than a full run."""
    if not op.streamed:
        return None
    for plan in op.steps:
        readers = [c for pin in plan.pins for c in plan.children.get(pin, ())]
        if len(readers) != len(set(readers)) or any(
            len(plan.children.get(pin, ())) > 1 for pin in plan.pins
        ):
            names = {p.node_id: p.step_name for p in op.steps}
            who = ", ".join(sorted({names.get(c, c) for c in readers}))
            return (
                f"the notes of {plan.step_name} reach several of its steps ({who}), which may "
                "change the same dicts; stream them apart, or run them unstreamed, to reuse "
                "(docs/incremental.md)"
            )
    return None


def emit_outputs(context: dg.AssetExecutionContext, op: OpPlan, ran: OpRun) -> Iterator[dg.Output]:
    """One Output per pin of every step of the op, with the step's metadata (the part of
    ``execute_op`` a sharded step's commit op runs, on the merged shards)."""
    for plan in op.steps:
        yield from _outputs(context, op, plan, ran.results[plan.node_id], ran.figures[plan.node_id])


def _check_not_sharded(op: OpPlan, plan: StepPlan, runtime: StepRuntime) -> None:
    """Run config asking for shards of a step built as one op: the graph's shape is fixed when
    the workflow is defined, so say where to ask (not silently run it whole)."""
    if op.shard is None and isinstance(runtime, BatchRuntime) and runtime.sharded:
        raise StepFailure(
            plan.label,
            f"runtime.shards={runtime.shards} / shard_size={runtime.shard_size} asks for "
            "shards, but this step was defined as one op: shard it where the workflow is "
            "defined (GraphbookWorkflow(shards={...}) or the component's shards), then "
            "runtime.shards changes how many",
            allow_retries=False,
        )


def log_emitter(log: Any) -> Emit:
    """A step's ``emit(level, message)`` onto a Dagster log manager (an op's or a resource's)."""

    def emit(level: str, message: str) -> None:
        known = level if level in ("info", "warning", "error", "debug") else "info"
        getattr(log, known)(message)

    return emit


def _run_alone(
    op: OpPlan,
    drivers: Mapping[str, StepDriver],
    inputs: Mapping[str, List[Any]],
    notes: Optional[List[Any]] = None,
) -> Dict[str, StepResult]:
    """The default mode: the op's one step over all the notes of its inputs, in Graphbook's
    order (a shard: over ``notes``, its slice of them)."""
    plan = op.steps[0]
    if notes is None:
        notes = step_notes(plan, inputs)
    result = run_all(drivers[plan.node_id], notes)
    if plan.kind != "source":
        result.stats = {**result.stats, "notes_in": len(notes)}
    return {plan.node_id: result}


def _run_streamed(
    op: OpPlan,
    drivers: Mapping[str, StepDriver],
    inputs: Mapping[str, List[Any]],
    settings: StreamSettings,
    emit: Any,
) -> Dict[str, StepResult]:
    """A segment: the steps stream notes to each other through the scheduler."""
    feeds = [
        StreamStep.inlet(src, pin, inputs[name] or [], readers)
        for (src, pin), (name, readers) in op.inlets.items()
    ]
    steps = [
        StreamStep.of(
            drivers[p.node_id], p.children, {x for x in p.pins if (p.node_id, x) in op.stored}
        )
        for p in op.steps
    ]
    run = StreamingRun(feeds + steps, emit, settings)
    nodes = run.run()
    results = {}
    for plan in op.steps:
        node, driver = nodes[plan.node_id], drivers[plan.node_id]
        stats = {
            "notes_in": driver.notes_in,
            "seconds": round(driver.seconds, 4),
            **driver.batch,
            "max_notes_queued": run.max_queued,
            **dropped_stats(driver.dropped),
            **(driver.reuse.stats() if driver.reuse is not None else {}),
        }
        if plan.kind == "source":
            del stats["notes_in"]  # a source reads no notes: no flat curve of zeros
        kept = {p: node.kept.get(p, []) for p in plan.pins}
        results[plan.node_id] = StepResult(kept, stats, driver.errors, driver.files, sent=node.sent)
    return results


def step_notes(plan: StepPlan, inputs: Mapping[str, List[Any]]) -> List[Any]:
    """All the input notes of ``plan``'s step, in Graphbook's order."""
    return interleave([inputs[name] or [] for name in plan.input_names])


def _outputs(
    context: dg.AssetExecutionContext,
    op: OpPlan,
    plan: StepPlan,
    result: StepResult,
    figures: Mapping[str, Any],
) -> Iterator[dg.Output]:
    """One Output per pin of ``plan``'s step: its notes where stored, with the step's metadata."""
    for error in result.errors:
        context.log.warning(f"{plan.label}: skipped {error.headline()}")
    meta = step_metadata(result.stats, result.files, result.errors, figures)
    if result.files and not op.streamed:  # which files this materialization wrote (issue 11.5)
        meta["files_manifest"] = _store_manifest(context, op, plan, result.files)
    for pin in plan.pins:
        stored = (plan.node_id, pin) in op.stored
        pin_meta = meta
        if op.streamed:  # a pin's count, stored or not (the IO manager sets the same when stored)
            pin_meta = {
                **meta,
                "dagster/row_count": dg.MetadataValue.int((result.sent or {}).get(pin, 0)),
                "stored": dg.MetadataValue.bool(stored),
            }
        notes = result.outputs.get(pin, []) if stored else None
        sheet = None
        if stored and plan.preview.on:  # URLs open only in the notes store's own bucket
            protocols = store_protocols(_notes_dir(context, op))
            shown = _computed_first(notes or [], (result.fresh or {}).get(pin))
            sheet = contact_sheet(shown, result.files, plan.preview, protocols)
        if sheet is not None:  # pictures of the pin's notes, or of the files its step wrote
            pin_meta = {**pin_meta, PREVIEW_META: sheet}
        if isinstance(notes, PinNotes):
            notes.source = plan.node_id  # children fed by several of its pins merge by emission
        yield dg.Output(notes, output_name=op.outputs[(plan.node_id, pin)], metadata=pin_meta)


def _computed_first(notes: List[Any], fresh: Optional[List[int]]) -> List[Any]:
    """An incremental step's notes for its preview: those computed in this run first."""
    if not fresh or len(fresh) == len(notes):
        return notes
    chosen = set(fresh)
    return [notes[i] for i in fresh] + [n for i, n in enumerate(notes) if i not in chosen]


def _notes_dir(context: dg.AssetExecutionContext, op: OpPlan) -> str:
    """Where the IO manager stores ``op``'s notes (a folder, or a bucket URL)."""
    from ...store.io_manager import NOTES_DIR_META, instance_notes_dir

    return op.storage.get(NOTES_DIR_META) or instance_notes_dir(context.instance)


def _store_manifest(
    context: dg.AssetExecutionContext, op: OpPlan, plan: StepPlan, files: List[Tuple[str, Any]]
) -> dg.MetadataValue:
    """The manifest of the files the step wrote, beside the notes of its first pin (where the
    IO manager puts them: the bucket when notes_dir is one), pruned with them."""
    from ...store.manifests import manifest_path, write_manifest

    notes_dir = _notes_dir(context, op)
    key = context.asset_key_for_output(op.outputs[(plan.node_id, plan.pins[0])])
    partitioned = context.assets_def.partitions_def is not None and context.has_partition_key
    partition = context.partition_key if partitioned else None
    path = manifest_path(notes_dir, key, partition, context.run_id)
    try:
        return dg.MetadataValue.path(write_manifest(files, path, op.name, context.run_id))
    except Exception as exc:
        raise StepFailure(
            plan.label,
            f"the manifest of the {len(files)} files it wrote cannot be stored at {path}: "
            f"{type(exc).__name__}: {exc}",
        ) from exc
