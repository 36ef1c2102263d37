"""A sharded batch step at run time: the plan op splits the step's input notes into contiguous
shards, each shard op runs the step on its shard through the one op body (``run_op``), and the
commit op checks that every shard arrived, merges them and yields the step's outputs as the
unsharded op does (``emit_outputs``).

- Each shard is the whole lifecycle (``on_start`` ... ``on_end``) on its notes, numbered as in the
  whole step (``first_note``), so errors and messages name the step's note numbers.
- The merge keeps the unsharded order: each pin's notes shard after shard. Counts and seconds
  are summed, ``items_per_s`` recomputed from the sums; errors and files are concatenated. The
  step's own figures (``dagster_metadata``): whole numbers are summed; other figures (a ratio
  such as accuracy) are never averaged: the step's ``on_commit(shard_figures)`` hook, if it has
  one, returns them, else they are left out with a ``figures_note`` saying why.
"""

from __future__ import annotations

import functools
import inspect
import multiprocessing
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import dagster as dg

from ...authoring.log import LogTarget, log_target
from ...plan.plan import OpPlan, StepPlan
from ...plan.settings import RUNTIME_KEY, BatchRuntime, read_runtime
from ...plan.shards import FIGURES_NOTE
from ..errors import StepFailure
from ..ownership.leases import shard_lease
from ..routing import PinNotes, StepResult
from ..step.driver import check_skipped_share
from .step_op import (
    OpRun,
    emit_outputs,
    failures_named,
    log_emitter,
    make_step,
    op_config,
    run_op,
    step_notes,
    step_partition_key,
)

# a shard op's retry policy when the workflow sets none: its process dying (kill -9, out of
# memory) raises nothing runtime.retries sees, so Dagster's executor retries the shard once
SHARD_CRASH_RETRY = dg.RetryPolicy(max_retries=1)
COMMIT_HOOK = "on_commit"  # a step's optional hook: on_commit(self, shard_figures) -> figures
# stats that are settings or ratios, not amounts: never summed across shards
_NOT_SUMMED = frozenset({"num_workers", "worker_nice", "items_per_s"})


@dataclass
class ShardSlice:
    """One shard's notes, as the plan op hands it to its shard op."""

    index: int
    count: int  # shards in this run
    start: int  # the step's number of the shard's first note
    notes: List[Any]

    def note_lists(self) -> List[List[Any]]:
        """What the notes IO manager names a note of when one cannot be stored."""
        return [self.notes]


@dataclass
class ShardResult:
    """What one shard op returns to the commit op."""

    index: int
    count: int
    start: int
    run: OpRun
    # the step's code version this shard ran (``ShardPlan.code_version`` in its process; None
    # in a result stored before shards recorded it)
    code_version: Optional[str] = None

    def note_lists(self) -> List[List[Any]]:
        """What the notes IO manager names a note of when one cannot be stored."""
        return [list(notes) for r in self.run.results.values() for notes in r.outputs.values()]


def split(notes: Sequence[Any], runtime: BatchRuntime) -> List[Tuple[int, List[Any]]]:
    """``(start, notes)`` per shard: contiguous, in order, sizes differing by at most one
    (``shard_size``: that many each, the last one the rest); at least one shard, even empty."""
    count = runtime.shard_count(len(notes))
    if runtime.shard_size is not None:
        bounds = [i * runtime.shard_size for i in range(count)] + [len(notes)]
    else:
        size, extra = divmod(len(notes), count)
        bounds = [i * size + min(i, extra) for i in range(count + 1)]
    return [(bounds[i], list(notes[bounds[i] : bounds[i + 1]])) for i in range(count)]


def _the_step(op: OpPlan) -> StepPlan:
    return op.steps[0]  # a sharded op is a step op: one step, never a stream


def _runtime(context: Any, op: OpPlan) -> BatchRuntime:
    defaults = op.shard.runtime_defaults() if op.shard else None
    runtime = read_runtime(_the_step(op).kind, op_config(context).get(RUNTIME_KEY), defaults)
    assert isinstance(runtime, BatchRuntime)  # only batch steps are sharded (plan/shards.py)
    return runtime


def plan_shards(
    context: Any, op: OpPlan, inputs: Mapping[str, List[Any]]
) -> Iterator[dg.DynamicOutput]:
    """The plan op: the step's input notes in Graphbook's order, as one ``ShardSlice`` per shard
    (the slices themselves, so upstream notes are read once, not once per shard)."""
    plan = _the_step(op)
    with failures_named(plan.label):
        notes = step_notes(plan, inputs)
        pieces = split(notes, _runtime(context, op))
    context.log.info(
        f"{plan.label}: {len(notes)} notes in {len(pieces)} shards "
        f"({', '.join(str(len(p)) for _, p in pieces)})"
    )
    for index, (start, piece) in enumerate(pieces):
        value = ShardSlice(index, len(pieces), start, piece)
        yield dg.DynamicOutput(value, mapping_key=f"shard_{index}")


def shard_resource_keys(op: OpPlan) -> List[str]:
    """The resources a shard op's steps take, and those they are built from."""
    return sorted({key for plan in op.steps for key in plan.resource_keys.values()})


@contextmanager
def shard_resources(context: Any, op: OpPlan) -> Iterator[Any]:
    """The shard's resources, built in its op body after its GPU lease: a resource Dagster built
    before the op (a model loaded onto ``cuda``) would have started CUDA on every GPU of the
    process before the lease chose one. Built from the job's own definitions and the run's
    config, as Dagster would (``dg.build_resources``), torn down when the shard ends."""
    keys = shard_resource_keys(op)
    if not keys:
        yield None
        return
    defs = context.job_def.resource_defs
    needed, todo = set(), list(keys)
    while todo:  # with the resources they take (a resource parameter bound to another)
        key = todo.pop()
        if key not in needed:
            needed.add(key)
            todo.extend(defs[key].required_resource_keys)
    given = context.run_config.get("resources") or {}
    config = {k: given[k] for k in needed if given.get(k)}  # {"config": ...}, as run config
    with dg.build_resources(
        {k: defs[k] for k in needed},
        instance=context.instance,
        resource_config=config,
        dagster_run=context.dagster_run,
        log_manager=context.log,
    ) as resources:
        yield resources


def run_shard(context: Any, op: OpPlan, piece: ShardSlice, crash_only: bool) -> ShardResult:
    """A shard op: the step over its slice, through the one op body, on GPUs leased for it
    (``leases.py``); no output yet.

    ``crash_only``: the op's retry policy is ``SHARD_CRASH_RETRY``, there for a dead process
    only, so a failure it raises is final once ``runtime.retries`` (which it obeys) is spent."""
    context.log.info(
        f"{_the_step(op).label}: shard {piece.index + 1} of {piece.count}, notes "
        f"{piece.start}..{piece.start + len(piece.notes) - 1} ({len(piece.notes)})"
    )
    plan, gpus = _the_step(op), op.shard.gpus if op.shard else None
    _share_cores(piece.count, context.log.info)
    owner = f"run {context.run_id}, shard {piece.index + 1} of {piece.count} of {plan.label}"
    runtime = _runtime(context, op)
    lease_for = functools.partial(shard_lease, runtime, gpus, label=plan.label, owner=owner)
    try:  # a lease that fails (no GPU free in time) is the step's failure, named, not retried
        with (
            failures_named(plan.label),
            lease_for(log=context.log.info, warn=context.log.warning) as lease,
            shard_resources(context, op) as resources,  # a model loads on the leased GPU
        ):
            run = run_op(
                context,
                op,
                {},
                notes=list(piece.notes),
                first_note=piece.start,
                resources=resources,
            )
    except dg.Failure as failure:
        failure.allow_retries = failure.allow_retries and not crash_only
        raise
    run.results[plan.node_id].stats.update(lease.stats)  # which GPUs, how long it waited
    version = op.shard.code_version if op.shard else None
    return ShardResult(piece.index, piece.count, piece.start, run, version)


def _share_cores(shards: int, log: Any) -> None:
    """A shard in a step process of its own (the multiprocess executor's, beside the others)
    runs torch on its share of the machine's cores, not on every core: N shards each spinning
    one thread a core made the 40,000-image bench's 2 shards take 4.3 times the unsharded
    step's CPU time. A run or a user that set ``OMP_NUM_THREADS`` keeps it; a shard run in the
    run's own process (one after another) or in a pod or Ray job of its own keeps torch's."""
    if os.environ.get("OMP_NUM_THREADS") or multiprocessing.parent_process() is None:
        return
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(1, (cores or 1) // max(1, min(shards, cores or 1)))
    if threads < torch.get_num_threads():
        torch.set_num_threads(threads)
        log(f"torch threads: {threads} ({cores} cores shared by {shards} shards)")


def commit_shards(context: Any, op: OpPlan, shards: Sequence[ShardResult]) -> Iterator[dg.Output]:
    """The commit op: every shard present (else it fails naming the missing ones), merged,
    checked against the whole step's limits, then one Output per pin as unsharded."""
    plan = _the_step(op)
    with failures_named(plan.label):
        ordered = check_complete(plan, shards)
        check_one_code_version(plan, ordered, op.shard.code_version if op.shard else None)
        runtime = _runtime(context, op)
        hook = _commit_hook(context, plan)
        merged = merge_shards(plan, ordered, hook)
        result = merged.results[plan.node_id]
        total = max(result.items_in, int(result.stats.get("notes_in", 0)))
        check_skipped_share(plan.label, len(result.errors), total, runtime.max_skipped_fraction)
    yield from emit_outputs(context, op, merged)


def check_complete(plan: StepPlan, shards: Sequence[ShardResult]) -> List[ShardResult]:
    """The shards in order, when every one of this run's shards (0..N-1) arrived exactly once.

    Dagster's re-execution from failure after an interrupted run can select the commit op alone,
    which then receives only the shards that had finished: merged, that would commit a partial
    result. So the commit refuses, naming the shards that are missing."""
    if not shards:
        raise StepFailure(
            plan.label,
            "no shard reached the commit: re-execute the step's plan and shard ops "
            "(the whole step), not the commit alone",
            allow_retries=False,
        )
    counts = {s.count for s in shards}
    expected = max(counts)
    indices = [s.index for s in shards]
    missing = sorted(set(range(expected)) - set(indices))
    twice = sorted({i for i in indices if indices.count(i) > 1})
    if missing or twice or len(counts) > 1:
        what = []
        if missing:
            what.append(f"shards {', '.join(map(str, missing))} of {expected} never arrived")
        if twice:
            what.append(f"shards {', '.join(map(str, twice))} arrived twice")
        if len(counts) > 1:
            what.append(f"shards were planned as {sorted(counts)} in all")
        raise StepFailure(
            plan.label,
            f"cannot commit a partial result: {'; '.join(what)}. Re-execute the missing "
            "shards (or the whole step), not the commit alone",
            allow_retries=False,
        )
    return sorted(shards, key=lambda s: s.index)


def check_one_code_version(
    plan: StepPlan, shards: Sequence[ShardResult], now: Optional[str]
) -> None:
    """Refuse to merge shards that ran different code, or code other than the step's now.

    A node file saved while a run's shards go on one after another, or fixed before a resume
    from failure (which reuses the finished shards), would otherwise make one asset of two
    versions of the step, recorded under the commit's version. Re-running the stale shards here
    would need the step's resources and GPUs in the commit; the user re-runs the whole step."""
    ran: Dict[str, List[int]] = {}
    for shard in shards:
        version = getattr(shard, "code_version", None)
        if version is not None:
            ran.setdefault(version, []).append(shard.index)
    if not ran or (len(ran) == 1 and now in (None, *ran)):
        return
    versions = "; ".join(
        f"shard{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))} of "
        f"{shards[0].count} ran code version {version}"
        for version, indices in ran.items()
    )
    raise StepFailure(
        plan.label,
        f"cannot commit shards that ran different code: {versions}; the step's code is now "
        f"version {now} (its node file or the node's values changed between them). Merged, "
        "they would make one asset of two versions of the step. Re-execute the whole step, "
        "all of its shards (a new run of its asset, not a re-execution from failure)",
        allow_retries=False,
    )


def commit_needs_step(cls: type) -> bool:
    """Whether a class's ``on_commit`` needs an instance (built with the step's resources: a
    model loaded in the commit op); a ``staticmethod`` or ``classmethod`` needs none."""
    hook = inspect.getattr_static(cls, COMMIT_HOOK, None)
    return hook is not None and not isinstance(hook, (staticmethod, classmethod))


def _commit_hook(context: Any, plan: StepPlan) -> Optional[Any]:
    """The step's ``on_commit``, if its class has one, logging as the step does: on the class
    (a static or class method), else on an instance built from the op config."""
    if not callable(getattr(plan.cls, COMMIT_HOOK, None)):
        return None
    if commit_needs_step(plan.cls):
        config = op_config(context)
        config.pop(RUNTIME_KEY, None)
        step = make_step(context, plan, config, step_partition_key(context, plan))
        hook = getattr(step, COMMIT_HOOK)
    else:
        hook = getattr(plan.cls, COMMIT_HOOK)
    target = LogTarget(plan.node_id, plan.step_name, log_emitter(context.log))

    def logged(shard_figures: List[Dict[str, Any]]) -> Any:
        with log_target(target):  # self.log in the hook speaks for the step
            return hook(shard_figures)

    return logged


def merge_shards(plan: StepPlan, shards: Sequence[ShardResult], hook: Any = None) -> OpRun:
    """The shards' runs (complete, in order) as one run of the step."""
    results = [s.run.results[plan.node_id] for s in shards]
    outputs: Dict[str, PinNotes] = {pin: PinNotes() for pin in plan.pins}
    emitted = 0
    for result in results:
        for pin in plan.pins:
            notes = result.outputs.get(pin, [])
            order = list(getattr(notes, "order", ()))
            if len(order) != len(notes):
                order = list(range(len(notes)))
            outputs[pin].extend(notes)
            outputs[pin].order.extend(emitted + k for k in order)
        emitted += sum(len(result.outputs.get(pin, [])) for pin in plan.pins)
    merged = StepResult(
        outputs,
        merge_stats([r.stats for r in results]),
        [e for r in results for e in r.errors],  # numbered in the whole step by each shard
        [f for r in results for f in r.files],
        items_in=sum(r.items_in for r in results),
    )
    figures = merge_figures(
        [s.run.figures.get(plan.node_id, {}) for s in shards], hook, [r.items_in for r in results]
    )
    return OpRun({plan.node_id: merged}, {plan.node_id: figures})


def merge_stats(stats: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The step's stats from its shards': amounts summed, ``items_per_s`` from the sums, a
    setting or text the same in every shard kept once (differing: the list of each)."""
    merged: Dict[str, Any] = {}
    keys = list(dict.fromkeys(k for s in stats for k in s))
    for key in keys:
        values = [s[key] for s in stats if key in s]
        if all(_is_number(v) for v in values) and key not in _NOT_SUMMED:
            total = sum(values)
            merged[key] = round(total, 4) if isinstance(total, float) else total
        elif all(isinstance(v, dict) for v in values):  # counts by name (reused_from)
            counts: Dict[str, Any] = {}
            for value in values:
                for name, n in value.items():
                    counts[name] = counts.get(name, 0) + n
            merged[key] = counts
        elif all(v == values[0] for v in values):
            merged[key] = values[0]
        else:
            merged[key] = values
    if "items_per_s" in merged and merged.get("seconds"):
        merged["items_per_s"] = round(merged.get("items", 0) / merged["seconds"], 2)
    merged["shards"] = len(stats)
    return merged


def merge_figures(
    figures: Sequence[Mapping[str, Any]], hook: Any = None, sizes: Sequence[int] = ()
) -> Dict[str, Any]:
    """The step's own figures from its shards': whole numbers summed (as counts); the others
    from the step's ``on_commit(shard_figures)``, which may also return any summed one (a
    constant), else left out. A ``figures_note`` names what was left out, and the whole numbers
    that were the same in every shard though the shards' ``sizes`` (items in) differ: a
    constant, surely, that a sum multiplies (shards of one size say nothing: counts of even
    shards are alike too)."""
    merged: Dict[str, Any] = {}
    left_out: List[str] = []
    alike: List[str] = []
    for key in dict.fromkeys(k for f in figures for k in f):
        values = [f[key] for f in figures if key in f]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            merged[key] = sum(values)
            if len(values) > 1 and len(set(values)) == 1 and len(set(sizes)) > 1:
                alike.append(key)
        else:
            left_out.append(key)
    returned = dict(hook([dict(f) for f in figures]) or {}) if hook is not None else {}
    merged.update(returned)
    notes = []
    dropped = [k for k in left_out if k not in returned]
    if dropped:
        notes.append(
            f"left out of this sharded step's figures: {', '.join(dropped)} (not whole numbers, "
            "so not summed, and never averaged across shards)"
        )
    alike = [k for k in alike if k not in returned]
    if alike:
        notes.append(
            f"summed as counts though the same in every shard, shards of different sizes: "
            f"{', '.join(alike)} (a constant must come from the hook)"
        )
    if notes:
        merged[FIGURES_NOTE] = (
            f"{'; '.join(notes)}: define {COMMIT_HOOK}(self, shard_figures) on the step to "
            "return these figures from every shard's"
        )
    return merged


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
