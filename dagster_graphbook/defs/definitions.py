"""One call from workflows to a ``dagster.Definitions``."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union

import dagster as dg

from ..authoring.graph import Graph
from ..errors import GraphbookError
from ..model.registry import NodeRegistry
from ..model.workflow import (
    UnboundResourceWarning,
    Workflow,
    WorkflowError,
    load_workflow,
    unbound_resources,
)
from ..plan.checks import bind_checks
from ..plan.gpus import ray_option_notices
from ..plan.job_steps import NOTES_IO_MANAGER_KEY
from ..plan.options import WorkflowOptions
from ..plan.settings import resolve_runtime
from ..plan.shards import sharded_steps
from ..plan.translator import GraphbookTranslator
from ..store.io_manager import in_process_memory, notes_io_manager, notes_metadata
from .assets import WorkflowDefs, build_workflow_defs
from .executor import (
    IN_MEMORY_NOTES,
    graphbook_executor,
    resolve_executor,
    steps_in_one_process,
)
from .load_errors import load_error_job
from .schedules import user_asset_key

logger = logging.getLogger("dagster_graphbook")
# load notices said in this process: a run rebuilds its job several times (recon, step processes)
_SAID: Set[str] = set()

WorkflowSource = Union[str, Path, Graph, Workflow]
# Set to 1 (CI), a workflow that fails to load fails the code location's load (`dg check defs`,
# `dagster definitions validate`) instead of showing as a failing job (issue 21.3).
STRICT_ENV = "DAGSTER_GRAPHBOOK_STRICT"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
# One IO manager object for every workflow: Dagster merges Definitions (Python modules and YAML
# components of one code location) only when a resource key maps to the very same object. Each
# workflow's own notes_dir travels in its assets' definition metadata instead (see io.py).
_NOTES_IO = notes_io_manager


@dataclass(frozen=True)
class GraphbookWorkflow(WorkflowOptions):
    """A workflow to expose, with how Dagster should run it (``WorkflowOptions``, keywords).

    ``source`` is a workflow JSON file, a ``.py`` file defining a ``Graph``, or a ``Graph``;
    ``custom_nodes`` are folders (or files) of node classes for JSON workflows; ``name`` the job
    and asset group name (default: the file's stem). Frozen: building never changes it; derive a
    variant with ``dataclasses.replace(spec, ...)``.
    """

    source: WorkflowSource
    custom_nodes: Sequence[Union[str, Path]] = ()
    name: Optional[str] = None


def load(
    spec: GraphbookWorkflow,
    translator: Optional[GraphbookTranslator] = None,
    strict: Optional[bool] = None,
    node_files: bool = True,
) -> Workflow:
    """The workflow ``spec`` names, with its overridable functions, GPUs and shards; a ``Workflow``
    given as ``spec.source`` is copied, not changed. With ``strict`` (``None``:
    ``$DAGSTER_GRAPHBOOK_STRICT``; CI's checks) a resource parameter left unconnected is an
    error, and so (``node_files``) is a custom node file that fails to import even if the
    workflow uses none of its nodes (the file is broken all the same); a workflow that uses a
    node of it fails first, naming its node. Without ``strict``, each is a warning."""
    strict = strict_from_env() if strict is None else strict
    if isinstance(spec.source, Workflow):
        workflow = spec.source
    else:
        registry = _registry(spec)
        errors = registry.import_errors if registry else []
        for error in errors:
            logger.warning("%s (workflows that use its nodes fail to load; the others load)", error)
        workflow = load_workflow(
            spec.source, registry, name=spec.name, search_path=spec.custom_nodes
        )
        if strict and node_files:
            refuse_broken_node_files(spec)
    _refuse_or_warn(workflow, unbound_resources(workflow), strict)
    for notice in ray_option_notices(workflow):  # graphbook.ray.options a Ray job cannot take
        if notice not in _SAID:
            _SAID.add(notice)
            logger.warning("%s: %s", workflow.source, notice)
    names = (translator or GraphbookTranslator()).step_names(workflow)
    gpus = workflow.gpus
    if spec.gpus is not None:
        from ..plan.gpus import resolve_gpus

        gpus = resolve_gpus(workflow, spec.gpus, names)
    shards = workflow.shards
    if spec.shards is not None:
        from ..plan.shards import resolve_shards

        shards = resolve_shards(workflow, spec.shards, names)
    previews = workflow.previews
    if spec.preview is not None:
        from ..plan.previews import resolve_previews

        previews = resolve_previews(workflow, spec.preview, names)
    # a Graph's settings for a step left out at load (idle: never run) go with the step; any
    # other key (a setting, a typo of one) is checked
    given = {
        k: v
        for k, v in workflow.runtime_given.items()
        if not (isinstance(v, Mapping) and k.isdigit() and k not in workflow.nodes)
    }
    runtime = resolve_runtime(workflow, [given, spec.runtime], names)
    return replace(
        workflow,
        overridable_functions=tuple(spec.overridable_functions),
        gpus=gpus,
        shards=shards,
        previews=previews,
        runtime=runtime,
    )


def _refuse_or_warn(workflow: Workflow, problems: List[str], strict: Optional[bool]) -> None:
    """``problems`` a workflow can run with but should not: a ``WorkflowError`` when strict, else
    a warning each (``dagster-graphbook validate`` prints them)."""
    if not problems:
        return
    if strict_from_env() if strict is None else strict:
        raise WorkflowError(workflow.source, problems)
    for problem in problems:
        warnings.warn(f"{workflow.source}: {problem}", UnboundResourceWarning, stacklevel=3)


def refuse_broken_node_files(spec: GraphbookWorkflow) -> None:
    """Strict: a custom node file of ``spec``'s folders that fails to import is an error."""
    registry = _registry(spec)
    errors = registry.import_errors if registry else []
    if errors and isinstance(spec.source, (str, Path)):
        source = Path(spec.source).resolve()
        said = "strict: every custom node file must import, used or not"
        raise WorkflowError(str(source), [f"{e} ({said})" for e in errors])


def _registry(spec: GraphbookWorkflow) -> Optional[NodeRegistry]:
    """The custom nodes a JSON workflow file uses; None for a Python workflow or a ``Graph``."""
    source = spec.source
    if isinstance(source, (Graph, Workflow)) or Path(source).suffix == ".py":
        return None
    try:
        return NodeRegistry.load(spec.custom_nodes)
    except FileNotFoundError as exc:  # a mistyped --custom-nodes / custom_nodes folder
        raise WorkflowError(str(Path(source).resolve()), [str(exc)]) from exc


def build_workflow(
    spec: GraphbookWorkflow,
    translator: Optional[GraphbookTranslator] = None,
    strict: Optional[bool] = None,
    node_files: bool = True,
) -> WorkflowDefs:
    """Load, validate and translate one workflow; ``strict`` (``None``:
    ``$DAGSTER_GRAPHBOOK_STRICT``) makes what is otherwise a load warning an error."""
    translator = translator or GraphbookTranslator()
    workflow = load(spec, translator, strict, node_files)
    _check_depth(workflow)
    names = translator.names(workflow)
    deps = {}
    for ref, keys in spec.external_deps.items():
        step = names.resolve_step(ref)
        if step is None:
            raise WorkflowError(
                workflow.source,
                [
                    f"external_deps names step {ref!r}, which is not in the workflow "
                    f"(steps: {names.step_list()})"
                ],
            )
        deps[step.node_id] = [user_asset_key(k) for k in keys]
    executor_def = resolve_executor(spec.executor, workflow.source, sharded_steps(workflow))
    _refuse_in_memory_notes(workflow, spec.notes_dir, executor_def)
    checks = bind_checks(spec.checks, names, workflow)
    defs = build_workflow_defs(
        workflow,
        translator,
        spec,
        external_deps=deps,
        executor_def=executor_def,
        checks=checks,
        storage=notes_metadata(spec.notes_dir, spec.notes_keep),
    )
    _automate(spec, defs)
    return defs


def _refuse_in_memory_notes(
    workflow: Workflow, notes_dir: Optional[str], executor_def: dg.ExecutorDefinition
) -> None:
    """A ``memory://`` notes_dir lives in one process: refuse it for a job whose steps run in
    processes of their own by default (sharded steps, a multiprocess or distributed executor).
    A run that picks multiprocess itself is refused at its start (``graphbook_executor``)."""
    if not in_process_memory(notes_dir) or steps_in_one_process(executor_def):
        return
    sharded = sharded_steps(workflow)
    if executor_def.name == "graphbook_executor" and sharded:
        why = (
            f"its sharded step {', '.join(map(repr, sharded))} runs its shards and commit in "
            "a process each (the default of a sharded job)"
        )
    else:
        why = f"its executor {executor_def.name!r} runs each step in a process of its own"
    said = IN_MEMORY_NOTES.format(why=why, how="executor='in_process'")
    raise WorkflowError(
        workflow.source, [f"workflow {workflow.name!r}: notes_dir {notes_dir!r} {said}"]
    )


def _automate(spec: GraphbookWorkflow, defs: WorkflowDefs) -> None:
    """Put the workflow's automation condition (if any) on its assets."""
    from .automation import automation_condition, with_automation

    condition = automation_condition(
        spec.automation,
        cron_schedule=spec.cron_schedule,
        schedule_hour=spec.schedule_hour,
        where=f"workflow {defs.workflow.name!r}",
        source=defs.workflow.source,
    )
    if condition is not None and spec.sensor is not None and spec.sensor.asset_key is None:
        raise WorkflowError(
            defs.workflow.source,
            [
                f"workflow {defs.workflow.name!r}: with automation the folder sensor only "
                "records new days as its asset: give it one (sensor_asset / asset_key)"
            ],
        )
    if condition is not None:
        defs.assets = with_automation(defs.assets, condition)


# Dagster's asset job resolution recurses once per step of the longest dependency chain
# (``create_adjacency_lists``, which walks up from wherever its set order starts): a chain of 2,000
# steps failed with RecursionError, and one of 1,000 did too, about 1 build in 16. Deeper
# workflows are refused here, at validate time; for the others this process's recursion limit is
# raised to the depth plus RECURSION_HEADROOM frames (never lowered), also for Dagster's later
# builds of the same job in this process (the code server's). Python 3.11 calls between Python
# functions do not grow the C stack, so a few thousand frames are safe.
MAX_CHAIN_DEPTH = 1000
RECURSION_HEADROOM = 1000


def _check_depth(workflow: Workflow) -> None:
    """Refuse a workflow whose longest chain of steps Dagster cannot build, naming the chain's
    end; make room for Dagster's recursion over the chains it can."""
    depth: Dict[str, int] = {}
    for node in workflow.steps():  # topological order: parents first
        depth[node.id] = 1 + max((depth.get(src, 0) for src, _ in node.inputs), default=0)
    deepest = max(depth.values(), default=0)
    if deepest + RECURSION_HEADROOM > sys.getrecursionlimit() and deepest <= MAX_CHAIN_DEPTH:
        sys.setrecursionlimit(deepest + RECURSION_HEADROOM)
    if deepest > MAX_CHAIN_DEPTH:
        end = max(depth, key=lambda k: depth[k])
        raise WorkflowError(
            workflow.source,
            [
                f"the longest chain of steps is {depth[end]} steps deep (ending at "
                f"node {end}); Dagster builds jobs up to "
                f"{MAX_CHAIN_DEPTH} steps deep: split the workflow into workflows "
                "joined by external_deps, or merge steps"
            ],
        )


class NameClashError(GraphbookError, dg.DagsterInvalidDefinitionError):
    """Two workflows of a code location define one job name or asset key."""


class NameClaims:
    """The job names and asset keys defined so far, each with the workflow file that defined it.

    Two workflows named alike (``MyFlow.json`` and ``sub/my_flow.json`` are both ``my_flow``)
    define the same job and asset keys; Dagster then refuses the code location with a bare
    ``Duplicate asset key``. Claiming every name as it is built names both files instead.
    """

    def __init__(self) -> None:
        self._owners: Dict[Tuple[str, str], Tuple[Any, str]] = {}

    def claim(self, owner: Any, source: Any, jobs: Sequence[Any], assets: Sequence[Any]) -> None:
        """Claim the names of ``jobs`` and ``assets`` (``AssetsDefinition``s; specs of external
        assets are shared, not claimed) for ``owner`` (one entry of a list, one component), the
        workflow ``source``; raise if another owner holds one of them."""
        names = [("job", job.name) for job in jobs] + [
            ("asset", key.to_user_string())
            for asset in assets
            if isinstance(asset, dg.AssetsDefinition)
            for key in asset.keys
        ]
        for kind, name in names:
            taken = self._owners.get((kind, name))
            if taken is not None and taken[0] != owner:
                raise NameClashError(
                    f"workflows {taken[1]} and {source} both define {kind} {name!r}: give one a "
                    "name of its own, with GraphbookWorkflow(..., name='...') in Python or "
                    "`name:` in the attributes of its component's defs.yaml"
                )
        self._owners.update(((kind, name), (owner, str(source))) for kind, name in names)


def strict_from_env() -> bool:
    """``$DAGSTER_GRAPHBOOK_STRICT`` as a flag (unset: off); a value it cannot read is refused."""
    value = os.environ.get(STRICT_ENV, "").strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(
            f"{STRICT_ENV}={os.environ[STRICT_ENV]!r}: set it to 1 (a workflow that fails to "
            "load fails the code location) or 0 / unset (it shows as a failing job)"
        )
    return value in _TRUE


def build_definitions(
    workflows: Sequence[Union[GraphbookWorkflow, WorkflowSource]],
    *,
    custom_nodes: Sequence[Union[str, Path]] = (),
    translator: Optional[GraphbookTranslator] = None,
    notes_dir: Optional[str] = None,
    extra_resources: Optional[Mapping[str, Any]] = None,
    notes_keep: Optional[int] = None,
    strict: Optional[bool] = None,
) -> dg.Definitions:
    """Dagster definitions for ``workflows``.

    A workflow that fails to load is logged and kept as a job of its name whose description and
    run give the error (file, node, reason), so the other workflows stay loaded (what the UI
    wants); with ``strict`` it raises instead, so ``dg check defs`` and ``dagster definitions
    validate`` fail (what CI wants). ``strict=None`` reads ``$DAGSTER_GRAPHBOOK_STRICT``.
    ``notes_dir``/``notes_keep`` apply to workflows that do not set their own.
    """
    from .schedules import schedules_and_sensors

    if strict is None:
        strict = strict_from_env()
    translator = translator or GraphbookTranslator()
    assets: List[Any] = []
    jobs: List[Any] = []
    automated: List[dg.ExecutorDefinition] = []  # executors of the workflows with automation
    resources: Dict[str, Any] = {NOTES_IO_MANAGER_KEY: _NOTES_IO, **(extra_resources or {})}
    schedules: List[Any] = []
    sensors: List[Any] = []
    external: List[dg.AssetSpec] = []
    claims = NameClaims()
    specs: List[GraphbookWorkflow] = []
    for index, item in enumerate(workflows):
        spec = _with_defaults(
            item
            if isinstance(item, GraphbookWorkflow)
            else GraphbookWorkflow(item, custom_nodes=custom_nodes),
            custom_nodes=custom_nodes,
            notes_dir=notes_dir,
            notes_keep=notes_keep,
        )
        specs.append(spec)
        try:  # broken node files no workflow uses: after every workflow's own errors (strict)
            defs = build_workflow(spec, translator, strict, node_files=False)
        except WorkflowError as exc:
            if strict:
                raise
            logger.error(
                "%s\n(the other workflows are loaded; this one shows as a job that fails)", exc
            )
            broken = load_error_job(spec, exc, translator)
            claims.claim(index, spec.source, [broken], [])
            jobs.append(broken)
            continue
        claims.claim(index, defs.workflow.source, [defs.job], defs.assets)
        assets += defs.assets
        if spec.automation not in (None, "none"):
            automated.append(defs.job.executor_def)
        defs.job = _with_own_resources(defs, extra_resources or {})
        jobs.append(defs.job)
        resources.update(defs.resources)
        for keys in spec.external_deps.values():
            external += [
                dg.AssetSpec(
                    user_asset_key(k),
                    description="external input of a Graphbook workflow",
                    group_name=translator.get_group_name(defs.workflow),
                    partitions_def=spec.partitions_def,  # the day of the input is the run's day
                )
                for k in keys
            ]
        new_schedules, new_sensors = schedules_and_sensors(spec, defs, translator)
        schedules += new_schedules
        sensors += new_sensors
    for spec in specs if strict else ():
        refuse_broken_node_files(spec)
    # Automation's runs go through Dagster's implicit asset job, which takes the Definitions'
    # executor: without one, a process per step (what graphbook_executor avoids for our jobs).
    executor = automated[0] if len({id(e) for e in automated}) == 1 else graphbook_executor
    return dg.Definitions(
        assets=[*assets, *_unique_specs(external)],
        jobs=jobs,
        resources=resources,
        schedules=schedules,
        sensors=sensors,
        executor=executor if automated else None,
    )


def _with_defaults(
    spec: GraphbookWorkflow,
    *,
    custom_nodes: Sequence[Union[str, Path]],
    notes_dir: Optional[str],
    notes_keep: Optional[int],
) -> GraphbookWorkflow:
    """``spec`` with ``build_definitions``' settings where it has none of its own (a copy: the
    caller's ``spec`` stays as it was)."""
    defaults: Dict[str, Any] = {}
    if not spec.custom_nodes and custom_nodes:
        defaults["custom_nodes"] = custom_nodes
    if spec.notes_dir is None and notes_dir is not None:
        defaults["notes_dir"] = notes_dir
    if spec.notes_keep is None and notes_keep is not None:
        defaults["notes_keep"] = notes_keep
    return replace(spec, **defaults) if defaults else spec


def _with_own_resources(defs: WorkflowDefs, extra: Mapping[str, Any]) -> dg.JobDefinition:
    """The workflow's job resolved with its own resources only.

    The Launchpad's run config schema lists every resource a job holds, and an asset job left to
    the Definitions to resolve holds all of theirs (every workflow's). Resolved beside its own
    resources, each job lists only those (with the notes and default IO managers); Dagster binds
    the Definitions' resources only to jobs that miss some, or keep the default ``io_manager``
    while the Definitions set one: so a user's ``io_manager`` is resolved with the job too."""
    io_manager = {"io_manager": extra["io_manager"]} if "io_manager" in extra else {}
    own = dg.Definitions(
        assets=defs.assets,
        jobs=[defs.job],
        resources={NOTES_IO_MANAGER_KEY: _NOTES_IO, **io_manager, **defs.resources},
    )
    with _gc_paused():
        return own.resolve_job_def(defs.job.name)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Dagster's job resolution topologically sorts the steps level by level, a new set per step
    and level (steps x depth): short-lived objects that made the cyclic GC walk the whole heap
    again and again, a quarter of a 1,000-step chain's build. Reference counting frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _unique_specs(specs: List[dg.AssetSpec]) -> List[dg.AssetSpec]:
    seen: Dict[dg.AssetKey, dg.AssetSpec] = {}
    for s in specs:
        seen.setdefault(s.key, s)
    return list(seen.values())
