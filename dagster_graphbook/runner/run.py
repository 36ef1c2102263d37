"""Run a workflow through Dagster from Python or the CLI, against a persistent instance."""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import sysconfig
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import dagster as dg
from upath import UPath

from ..authoring.graph import Graph, register_runner
from ..dagster_internals import (
    LOG_RECORD_EVENT_ATTR,
    PARENT_RUN_ID_TAG,
    RESUME_RETRY_TAG,
    ROOT_RUN_ID_TAG,
    TAGS_TO_MAYBE_OMIT_ON_RETRY,
    deep_merge_dicts,
)
from ..defs.definitions import GraphbookWorkflow, build_workflow
from ..defs.executor import MULTIPROCESS, default_mode, import_executor
from ..defs.instance import default_dagster_home, location_home
from ..errors import RequestError
from ..execution import REFRESH_TAG, InterruptBackstop, own_run, sweep_dead_runs
from ..model import params as ptypes
from ..model.workflow import Workflow, WorkflowError
from ..plan.job_steps import (
    NOTES_IO_MANAGER_KEY,
    TaggedStep,
    job_source,
    node_tags,
    placeholder_message,
    read_steps_tag,
    runtime_problems,
    unfilled_in_job,
)
from ..plan.translator import (
    GraphbookTranslator,
    import_translator,
    path_of_translator,
    resolve_refs,
)
from ..store.io_manager import notes_io_manager
from ..store.versions import read_notes, run_lineage, stored_notes_path

_log = logging.getLogger("dagster_graphbook")

RUN_TOKEN_TAG = "dagster_graphbook/run_token"


def tryout_home(dagster_home: Optional[str] = None) -> str:
    """Where try-outs record: ``.dagster_graphbook/tryouts`` beside the code location's instance
    (``location_home(dagster_home)``), created with a dagster.yaml.

    An instance of its own, so a try-out's runs, asset materializations and stored notes (under
    its storage) never become the code location's latest ones.
    """
    beside = os.path.dirname(location_home(dagster_home))
    return default_dagster_home(os.path.join(beside, ".dagster_graphbook", "tryouts"))


def get_instance(dagster_home: Optional[str] = None) -> dg.DagsterInstance:
    """The instance at ``dagster_home``; its storage is set up under a file lock.

    Two processes opening a fresh instance at once (a sensor's run and a CLI run) would both create
    the SQLite tables and stamp them, leaving two alembic heads and every later run failing.
    """
    import fcntl

    home = default_dagster_home(dagster_home)
    with open(os.path.join(home, ".graphbook-setup.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            instance = dg.DagsterInstance.from_config(home)
            instance.get_runs(limit=1)  # run storage set up (tables created and stamped) now
            instance.event_log_storage.get_asset_records([])  # and the event log's index
            if instance.schedule_storage is not None:
                instance.schedule_storage.all_instigator_state()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return instance


@dataclass
class WorkflowRun:
    """A finished run: its id, outcome and the notes of every step and pin."""

    run_id: str
    success: bool
    seconds: float
    notes: Dict[str, Dict[str, List[Any]]] = field(
        default_factory=dict
    )  # step name -> pin -> notes
    failure: Optional[str] = None  # each failure: its headline, then where it was raised
    metadata: Dict[str, Dict[str, Any]] = field(
        default_factory=dict
    )  # asset key -> its materialization's metadata values
    dagster_home: Optional[str] = None  # the instance that recorded the run

    def log_hint(self) -> str:
        """Where the run's full event log (tracebacks included) is."""
        home = self.dagster_home or "$DAGSTER_HOME"
        return (
            f"full log (traceback included): run {self.run_id} in `DAGSTER_HOME={home} dagster dev`"
        )

    def __getitem__(self, step: str) -> Dict[str, List[Any]]:
        return self.notes[step]

    def counts(self) -> Dict[str, Dict[str, int]]:
        return {s: {p: len(n) for p, n in pins.items()} for s, pins in self.notes.items()}


_ConfigTarget = Tuple[str, str, Tuple[str, ...]]  # (section, name, path): where a STEP's config is


def _params_config(
    params: Mapping[str, Any],
    targets: Mapping[str, _ConfigTarget],
    refused: Callable[[str], Exception],
) -> Dict[str, Any]:
    """The run config that sets each ``{"STEP.PARAM": value}`` of ``params``. ``targets``: each
    name STEP may be -> the config its PARAM goes under, ``config[section][name]["config"][*path]``
    (``("ops", op, ())``, a step of a streaming op ``("ops", op, (step op,))``, a resource
    ``("resources", key, ())``); ``refused(key)``: the error for a key whose STEP is none of
    them, or that has no PARAM. `_with_params` sets it over a caller's run config."""
    config: Dict[str, Any] = {}
    for key, value in params.items():
        step, _, path = key.partition(".")
        if step not in targets or not path:
            raise refused(key)
        section, name, within = targets[step]
        target = config.setdefault(section, {}).setdefault(name, {}).setdefault("config", {})
        *parents, leaf = [*within, *path.split(".")]
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    return config


def _with_params(
    run_config: Optional[Mapping[str, Any]], from_params: Mapping[str, Any]
) -> Dict[str, Any]:
    """``run_config`` with the config of ``--set`` params (`_params_config`) merged in deeply:
    a param replaces only its own value, never the rest of its op's config that ``run_config``
    gives (``runtime.max_skipped_fraction`` beside a param's ``runtime.on_item_error``)."""
    return dict(deep_merge_dicts(dict(run_config or {}), from_params))


def run_config_for(
    workflow: Workflow, params: Mapping[str, Any], translator: Optional[GraphbookTranslator] = None
) -> Dict[str, Any]:
    """``{"Step.param": v, "Step.runtime.num_workers": 0}`` -> Dagster run config."""
    translator = translator or GraphbookTranslator()
    names = translator.names(workflow)
    steps = {ref: s.op_name for ref, s in names.step_refs().items()}  # step, label, class, id
    targets: Dict[str, _ConfigTarget] = {
        **{ref: ("resources", key, ()) for ref, key in names.resource_refs.items()},
        **{ref: ("ops", op, ()) for ref, op in steps.items()},  # a step's name wins
    }

    def refused(key: str) -> Exception:
        name = key.partition(".")[0]
        if name in names.shared:  # two steps of one class, two resources of one class
            return WorkflowError(
                workflow.source,
                [
                    f"cannot set {key!r}: {name!r} names several steps or resources "
                    f"({', '.join(names.shared[name])}): name the one to set"
                ],
            )
        choices = ", ".join(sorted(set(steps)))
        return WorkflowError(
            workflow.source, [f"cannot set {key!r}: expected STEP.PARAM with STEP one of {choices}"]
        )

    sections = _params_config(params, targets, refused)
    return {s: sections[s] for s in ("ops", "resources") if s in sections}


def _reconstruct_job(
    source: str,
    custom_nodes: Tuple[str, ...],
    name: Optional[str],
    notes_dir: Optional[str],
    streaming: Any = False,
    translator: Optional[str] = None,
    shards: Optional[str] = None,
    executor: Optional[str] = None,
    preview: Optional[str] = None,
    runtime: Optional[str] = None,
) -> dg.JobDefinition:
    """Rebuild the job in an executor's step process (multiprocess executor); ``translator`` is
    the ``module:Class`` of the run's translator, ``shards``, ``preview`` and ``runtime`` the
    run's settings as JSON, ``executor`` the ``module:attr`` of the run's executor
    (dagster-ray's)."""
    spec = GraphbookWorkflow(
        source,
        custom_nodes=custom_nodes,
        name=name,
        streaming=streaming,
        shards=json.loads(shards) if shards else None,
        executor=import_executor(executor) if executor else None,
        preview=json.loads(preview) if preview else None,
        runtime=json.loads(runtime) if runtime else None,
    )
    defs = _definitions(spec, notes_dir, import_translator(translator))[0]
    return defs.resolve_job_def(list(defs.jobs or ())[0].name)


def _definitions(
    spec: GraphbookWorkflow,
    notes_dir: Optional[str],
    translator: Optional[GraphbookTranslator] = None,
) -> Tuple[dg.Definitions, Any]:
    spec = replace(spec, notes_dir=notes_dir)
    wdefs = build_workflow(spec, translator)
    defs = dg.Definitions(
        assets=wdefs.assets,
        jobs=[wdefs.job],
        resources={NOTES_IO_MANAGER_KEY: notes_io_manager, **wdefs.resources},
        loggers={"console": failures_unsaid_console_logger},
    )
    return defs, wdefs


_RETURNED = (  # the events whose errors WorkflowRun.failure holds (`_failure_message`)
    dg.DagsterEventType.STEP_FAILURE,
    dg.DagsterEventType.RESOURCE_INIT_FAILURE,
    dg.DagsterEventType.RUN_FAILURE,
)


def _not_returned(record: logging.LogRecord) -> bool:
    event = getattr(record, LOG_RECORD_EVENT_ATTR, None)
    return getattr(event, "event_type", None) not in _RETURNED


@dg.logger(
    dg.colored_console_logger.config_schema,
    description="Dagster's colored console logger, less the failures a WorkflowRun returns",
)
def failures_unsaid_console_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    """The console logger of runs started here: the caller says the run's failure once, from
    ``WorkflowRun.failure`` (Dagster's logger printed each with its stack trace, twice)."""
    logger = dg.colored_console_logger.logger_fn(init_context)
    logger.addFilter(_not_returned)
    return logger


def _failures_unsaid(job: dg.JobDefinition) -> dg.JobDefinition:
    """``job`` with `failures_unsaid_console_logger` where it has Dagster's default loggers."""
    if dict(job.loggers) == {"console": dg.colored_console_logger}:
        return job.with_logger_defs({"console": failures_unsaid_console_logger})
    return job


def run_workflow(
    workflow: Union[str, Path, Graph],
    custom_nodes: Sequence[Union[str, Path]] = (),
    params: Optional[Mapping[str, Any]] = None,
    *,
    instance: Optional[dg.DagsterInstance] = None,
    dagster_home: Optional[str] = None,
    executor: Optional[str] = None,
    partition_key: Optional[str] = None,
    notes_dir: Optional[str] = None,
    tags: Optional[Mapping[str, str]] = None,
    run_config: Optional[Mapping[str, Any]] = None,
    name: Optional[str] = None,
    quiet: bool = True,
    streaming: Union[bool, Sequence[str]] = False,
    translator: Optional[GraphbookTranslator] = None,
    record: bool = False,
    from_failure: Optional[str] = None,
    shards: Any = None,
    executor_config: Optional[Mapping[str, Any]] = None,
    preview: Any = None,
    say: Optional[Callable[[str], None]] = None,
    runtime: Optional[Mapping[str, Any]] = None,
    full: bool = False,
) -> WorkflowRun:
    """Run ``workflow`` through Dagster and return the notes of every step and pin.

    Where it records: ``instance``, else ``dagster_home``; with neither, a try-out records into an
    instance of its own (``tryout_home()``), apart from the code location's, unless ``record``
    (then ``$DAGSTER_HOME`` or ``./.dagster_home``, where ``materialize`` and ``dagster dev``
    record).

    ``executor`` is ``in_process`` (the default, unless a step is sharded: then
    ``multiprocess``, its shards in parallel), ``multiprocess`` (one process per step, as in
    ``dagster dev``; needs a workflow file or a Graph defined in a file) or the ``module:attr``
    of an ``ExecutorDefinition`` that each step process imports (``dagster_ray:ray_executor``,
    what ``graphbook.ray.RayExecutor`` asks for), ``executor_config`` its run config (the
    ``execution: {config: ...}`` section). ``streaming`` runs all
    steps as one op, or a list of step names those steps (docs/streaming.md); only the pins no
    step of the segment reads keep notes. ``preview``: as ``GraphbookWorkflow(preview=...)``.
    ``shards``: as ``GraphbookWorkflow(shards=...)``,
    ``{STEP: N}`` runs those batch steps as N shards (docs/sharding.md). ``translator``
    names the assets and ops as in the code location (``build_definitions(translator=...)``).
    ``runtime``: as ``GraphbookWorkflow(runtime=...)``, the steps' settings
    (``{"incremental": True}``: docs/incremental.md); ``full``: the incremental steps recompute
    every note and refresh their store (the CLI's ``--full``).

    ``from_failure``: the id of a failed (or killed) run of this workflow to resume, as the UI's
    "Re-execute from failure": the steps that did not finish run again, the others' stored notes
    are read; the run config, partition and executor are that run's (give no ``params``,
    ``partition_key`` or ``run_config``); the workflow and its flags must build the same job.

    ``quiet``: the console shows warnings, not the run's failure, which the caller reads from
    ``WorkflowRun.failure`` and says once (Dagster's console logger printed it twice). ``say``
    is told, before the run, where its steps run when that is not this process.
    """
    if instance is None:
        home = dagster_home if dagster_home is not None or record else tryout_home()
        instance = get_instance(home)
    spec = GraphbookWorkflow(
        workflow,
        custom_nodes=[str(Path(p).resolve()) for p in custom_nodes],
        name=name,
        streaming=streaming,
        shards=shards,
        executor=None if executor in _OWN_EXECUTORS else import_executor(executor),
        preview=preview,
        runtime=runtime,
    )
    translator = translator or GraphbookTranslator()
    defs, wdefs = _definitions(spec, notes_dir, translator)
    job = defs.resolve_job_def(wdefs.job.name)
    run = _run(
        instance,
        job,
        f"workflow {wdefs.workflow.source}",
        config=lambda: _workflow_config(
            wdefs, job, params, run_config, partition_key, streaming, translator
        ),
        recon=lambda: _workflow_recon(
            workflow, spec, name, notes_dir, streaming, translator, executor
        ),
        request=_Request(
            params,
            partition_key,
            run_config,
            _refresh_tags(tags, full),
            quiet,
            from_failure,
            executor,
            executor_config,
            say,
        ),
    )
    if run.success:
        run.notes = _load_notes(run.run_id, wdefs, translator, instance)
    return run


@dataclass
class _Request:
    """What the caller of `run_workflow` or `run_job` asked of the run itself."""

    params: Optional[Mapping[str, Any]]
    partition_key: Optional[str]
    run_config: Optional[Mapping[str, Any]]
    tags: Optional[Mapping[str, str]]
    quiet: bool
    from_failure: Optional[str]
    # None: the job's default (in process; multiprocess for a job with a sharded step), or
    # in_process, multiprocess, or the module:attr of an ExecutorDefinition
    executor: Optional[str] = None
    executor_config: Optional[Mapping[str, Any]] = None  # the latter's execution config
    # told where the steps run when that is not this process (the CLI prints it)
    say: Optional[Callable[[str], None]] = None


# run_workflow's own executors (graphbook_executor's modes); any other is a module:attr
_OWN_EXECUTORS = (None, "in_process", "multiprocess")
_QUIET_LOGGERS = {"console": {"config": {"log_level": "WARNING"}}}  # warnings, not the failure


def _run(
    instance: dg.DagsterInstance,
    job: dg.JobDefinition,
    what: str,
    config: Callable[[], Dict[str, Any]],
    recon: Callable[[], Any],
    request: _Request,
) -> WorkflowRun:
    """The one run path of `run_workflow` and `run_job` (``what``: the code the user named):
    resume run ``request.from_failure``, or start a run of ``job`` with the run config
    ``config()`` (``--set`` params in it; refused before any run starts). ``recon()``: the job
    rebuilt in whichever process runs a step (a resumed or multiprocess run). Returns the ended
    run, its notes not read yet."""
    start = time.perf_counter()
    if request.from_failure is not None:
        _no_new_inputs(what, request.params, request.partition_key, request.run_config)
        parent = _parent_run(instance, request.from_failure, job, what)
        _say_where(request, what, job, _resumed_mode(job, parent))
        run_id, success = _resume(recon(), instance, parent, request.tags)
        return _finished_run(instance, run_id, success, start)
    run_config = config()
    if request.quiet:
        run_config.setdefault("loggers", copy.deepcopy(_QUIET_LOGGERS))
    run_tags = _run_tags(request.tags)
    partition_key = request.partition_key
    mode = request.executor or default_mode(job.executor_def)
    _say_where(request, what, job, mode)
    if mode == "in_process":
        if job.executor_def.name == "graphbook_executor":  # recorded, so a resume is in process too
            run_config.setdefault("execution", {"config": {"in_process": {}}})
        result: Any = _execute_in_process(job, instance, run_config, partition_key, run_tags)
    else:
        job_recon = recon()
        if partition_key is not None:
            run_tags["dagster/partition"] = partition_key
        if mode == "multiprocess":  # graphbook_executor's mode
            run_config.setdefault("execution", {"config": dict(MULTIPROCESS)})
        elif request.executor_config is not None:  # a module:attr executor's run config
            run_config.setdefault("execution", {"config": dict(request.executor_config)})
        # else the job's own executor with the config it was defined with (.configured(...))
        with _backstop(instance, run_tags):
            result = dg.execute_job(
                job_recon,
                instance=instance,
                run_config=run_config,
                tags=run_tags,
                raise_on_error=False,
            )
    return _finished_run(instance, result.run_id, result.success, start)


def _resumed_mode(job: dg.JobDefinition, parent: dg.DagsterRun) -> str:
    """Where a re-execution of ``parent`` runs its steps: ``graphbook_executor``'s mode as the
    parent's run config picked it, else the job's executor."""
    if job.executor_def.name != "graphbook_executor":
        return default_mode(job.executor_def)
    run_config: Mapping[str, Any] = parent.run_config or {}
    picked = (run_config.get("execution") or {}).get("config") or {}
    return next(iter(picked), None) or default_mode(job.executor_def)


def _say_where(request: _Request, what: str, job: dg.JobDefinition, mode: str) -> None:
    """Tell ``request.say`` where the steps run, unless in this process (the default): a run on
    the job's Ray or k8s executor must not look like a local one, nor the other way round."""
    if request.say is None or mode == "in_process":
        return
    if mode == "multiprocess":
        where = "a process per step (the multiprocess executor)"
    elif mode == "job":
        where = f"the job's executor {job.executor_def.name!r}"
    else:
        where = f"executor {mode}"
    request.say(f"{what}: steps run on {where}")


register_runner(run_workflow)  # Graph.run runs through it (the authoring API imports no runner)


def _workflow_config(
    wdefs: Any,
    job: dg.JobDefinition,
    params: Optional[Mapping[str, Any]],
    run_config: Optional[Mapping[str, Any]],
    partition_key: Optional[str],
    streaming: Union[bool, Sequence[str]],
    translator: GraphbookTranslator,
) -> Dict[str, Any]:
    """The run config of a workflow's run: ``run_config`` with ``params`` (``--set``) in it."""
    config = _with_params(run_config, run_config_for(wdefs.workflow, params or {}, translator))
    if streaming:
        from ..plan.segments import nest_step_config

        config = nest_step_config(config, wdefs.workflow, translator, streaming=streaming)
    return _request_config(config, job, partition_key, f"workflow {wdefs.workflow.source}")


def _workflow_recon(
    workflow: Any,
    spec: GraphbookWorkflow,
    name: Optional[str],
    notes_dir: Optional[str],
    streaming: Union[bool, Sequence[str]],
    translator: GraphbookTranslator,
    executor: Optional[str] = None,
) -> Any:
    """The workflow's job, rebuilt from its file in whichever process runs a step (with the
    run's executor where it is not one of ``graphbook_executor``'s modes)."""
    stream = streaming if isinstance(streaming, bool) else tuple(streaming)
    args = (
        _source_path(workflow),
        tuple(spec.custom_nodes),
        name,
        notes_dir,
        stream,
        path_of_translator(translator),
        json.dumps(spec.shards) if spec.shards is not None else None,
        None if executor in _OWN_EXECUTORS else executor,
        json.dumps(spec.preview) if spec.preview is not None else None,
        json.dumps(spec.runtime) if spec.runtime is not None else None,
    )
    return dg.build_reconstructable_job(
        "dagster_graphbook.runner.run",
        "_reconstruct_job",
        reconstructable_args=args,  # type: ignore[arg-type]  # dagster annotates tuple[object]
    )


def _request_config(
    config: Dict[str, Any], job: dg.JobDefinition, partition_key: Optional[str], source: str
) -> Dict[str, Any]:
    """``config`` with its ``--set`` texts read as their fields' types, refused before any run
    starts where the run could not go right: a partition key for a job without partitions
    (Dagster's own error is a CheckError traceback), config the job cannot take (said as
    ``STEP.PARAM``, not as Dagster's op path), a ``{partition_key}`` nothing fills in."""
    if partition_key is not None and job.partitions_def is None:
        raise RequestError(
            f"{source} has no partitions: run it without a partition key (--partition)"
        )
    schema = job.run_config_schema.config_type
    config = ptypes.read_text_values(config, schema)
    try:
        resolved = dg.validate_run_config(job, config)
    except dg.DagsterInvalidConfigError as exc:
        lines = ptypes.config_error_lines(exc, schema, _config_owner(job))
        head = f"{source}: " if len(lines) == 1 else f"{source}: {len(lines)} config errors:\n  - "
        raise RequestError(head + "\n  - ".join(lines)) from None
    found = unfilled_in_job(job, resolved) if partition_key is None else {}
    if found:
        raise RequestError(
            f"{source}: {placeholder_message(found, job.partitions_def is not None)}"
        )
    problems = runtime_problems(job, resolved)
    if problems:
        raise RequestError(f"{source}: " + "; ".join(f"{k}: {v}" for k, v in problems.items()))
    return config


def _config_owner(job: dg.JobDefinition) -> Any:
    """``path -> (step, path within the step's config)`` for a path of the job's run config
    (``ops.job__Step.config.param`` -> ``("Step", ["param"])``); resources by their key."""
    steps = {(op, None if t.op_name == op else t.op_name): t.step for op, t in _tagged_steps(job)}

    def owner(parts: Sequence[str]) -> Optional[Tuple[str, Sequence[str]]]:
        if len(parts) < 3 or parts[2] != "config":
            return None
        section, name, rest = parts[0], parts[1], list(parts[3:])
        if section == "resources":
            return f"resource {name}", rest
        if section != "ops":
            return None
        if (name, None) in steps:
            return steps[(name, None)], rest
        if rest and (name, rest[0]) in steps:
            return steps[(name, rest[0])], rest[1:]
        return None

    return owner


INTERRUPT_GRACE_S = 15.0  # after SIGINT/SIGTERM, a run still going this long is stopped


def _backstop(instance: dg.DagsterInstance, run_tags: Mapping[str, str]) -> InterruptBackstop:
    return InterruptBackstop(instance, RUN_TOKEN_TAG, run_tags[RUN_TOKEN_TAG], INTERRUPT_GRACE_S)


def _refresh_tags(tags: Optional[Mapping[str, str]], full: bool) -> Optional[Mapping[str, str]]:
    """The caller's tags, with the one that makes incremental steps recompute all (``full``)."""
    return {**(tags or {}), REFRESH_TAG: "refresh"} if full else tags


def _run_tags(tags: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """The caller's tags and a token to find the run by (the CLI passes its own)."""
    return {RUN_TOKEN_TAG: uuid.uuid4().hex, **(tags or {})}


def _execute_in_process(
    job: dg.JobDefinition,
    instance: dg.DagsterInstance,
    config: Mapping[str, Any],
    partition_key: Optional[str],
    run_tags: Mapping[str, str],
) -> dg.ExecuteInProcessResult:
    """Run ``job`` here, holding its run-owner lock (``execute_in_process`` bypasses the job's
    executor, which takes it otherwise): killed, the run is found dead by the next one."""
    run_id = str(uuid.uuid4())
    with own_run(instance, run_id, _log.warning), _backstop(instance, run_tags):
        return job.execute_in_process(
            run_config=config,
            instance=instance,
            partition_key=partition_key,
            raise_on_error=False,
            tags=run_tags,
            run_id=run_id,
        )


@dataclass(frozen=True)
class CodeLocationModule:
    """The module ``materialize`` loads, the folder it is imported from, and where its name came
    from (said when it cannot be loaded)."""

    module: str
    root: Path
    origin: str
    in_project: bool  # read from a dg project's settings


DEFAULT_MODULE = "definitions"  # this repository's layout (workspace.yaml's autoload_defs_module)


def code_location_module(
    module: Optional[str] = None, start: Optional[Path] = None
) -> CodeLocationModule:
    """``module`` if given; else the module ``dg`` loads for the project holding ``start`` (the
    current folder): the nearest ``dg.toml`` or ``pyproject.toml`` with a ``[tool.dg]`` table, up
    from ``start`` (dg's own discovery), its ``[tool.dg.project] code_location_target_module``,
    else ``<root_module>.definitions``; else ``definitions`` here. Imported from the project's
    folder where there is one."""
    from dagster_shared.utils.config import (
        detect_dg_config_file_format,
        discover_config_file,
        load_toml_as_dict,
    )

    here = (start or Path.cwd()).absolute()
    found = discover_config_file(here)
    project: Dict[str, Any] = {}
    if found is not None:
        toml = load_toml_as_dict(found)
        node = toml if detect_dg_config_file_format(found) == "root" else toml["tool"]["dg"]
        project = node.get("project") or {}
    if module is not None:
        root = found.parent if found is not None and project else here
        return CodeLocationModule(module, root, "--module", False)
    if found is None or not project.get("root_module"):
        return CodeLocationModule(DEFAULT_MODULE, here, "the default, outside a dg project", False)
    table = "[project]" if detect_dg_config_file_format(found) == "root" else "[tool.dg.project]"
    if project.get("code_location_target_module"):
        origin = f"code_location_target_module in {table} of {found}"
        target = project["code_location_target_module"]
        return CodeLocationModule(target, found.parent, origin, True)
    origin = f"root_module {project['root_module']!r} + '.definitions', {table} of {found}"
    return CodeLocationModule(f"{project['root_module']}.definitions", found.parent, origin, True)


def load_code_location(module: Union[None, str, CodeLocationModule] = None) -> dg.Definitions:
    """The Definitions of a code location module (``code_location_module(module)``): its
    ``dg.Definitions``, or the one its ``@dg.definitions`` function returns (the layout ``dg``
    scaffolds), or, for a package without either, its autoloaded Python modules and
    ``defs.yaml`` components."""
    import importlib
    import sys

    target = module if isinstance(module, CodeLocationModule) else code_location_module(module)
    for folder in dict.fromkeys([str(target.root), os.getcwd()]):
        if folder not in sys.path:
            sys.path.insert(0, folder)  # as `dg` and `dagster dev` import it
    name = target.module
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(f"{exc.name}.")):
            raise  # a module the code location imports is missing: its traceback helps
        fix = "run from the project's folder" if target.origin == "--module" else "correct it"
        raise RequestError(
            f"no code location module {name!r} ({target.origin}) in {target.root}: {fix}, or "
            "name the module that holds its Definitions with --module"
        ) from exc
    found = _definitions_in(mod)
    if found is not None:
        return found
    if not hasattr(mod, "__path__"):  # a module, not a package: nothing to autoload
        raise RequestError(
            f"code location module {name!r} ({target.origin}) holds no dg.Definitions and no "
            "@dg.definitions function: name the module that does with --module"
        )
    return _autoload(mod, target)


def _autoload(mod: Any, target: CodeLocationModule) -> dg.Definitions:
    """Package ``mod``'s Python modules and ``defs.yaml`` components (``load_defs``); a package
    that is no such folder (``--module photos``, the project's root module) is said in a line,
    with the module the project names."""
    import warnings

    from dagster.components import load_defs
    from dagster.components.core.load_defs import get_project_root

    try:
        root = get_project_root(mod)
    except FileNotFoundError:  # a deployed folder without pyproject.toml: its root is here
        root = Path(os.getcwd())
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DeprecationWarning
        )  # load_defs: fine for a package, no dg project needed
        try:
            return load_defs(mod, project_root=root)
        except Exception as exc:
            wrong = _cause(exc, dg.DagsterInvariantViolationError)
            if wrong is None or _cause(exc, (WorkflowError, RequestError)) is not None:
                raise  # a component's own error (said as it is), or a bug (its traceback helps)
            project = code_location_module()
            hint = (
                f"the project's is {project.module!r} ({project.origin})"
                if project.in_project and project.module != target.module
                else "name the module that holds its Definitions with --module"
            )
            raise RequestError(
                f"code location module {target.module!r} ({target.origin}) does not load as a "
                f"package of definitions ({wrong}); {hint}"
            ) from exc


def _cause(exc: BaseException, kinds: Union[type, Tuple[type, ...]]) -> Optional[BaseException]:
    """``exc`` or the first error of its chain of causes that is one of ``kinds``."""
    seen: Optional[BaseException] = exc
    while seen is not None:
        if isinstance(seen, kinds):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _definitions_in(mod: Any) -> Optional[dg.Definitions]:
    """The ``dg.Definitions`` at module scope of ``mod``, or what its ``@dg.definitions``
    function returns (called as Dagster calls it, without a context); None if it has neither."""
    from dagster.components.definitions import LazyDefinitions

    values = list(vars(mod).values())
    lazy = [v for v in values if isinstance(v, LazyDefinitions)]
    if lazy:
        loaded = lazy[0]()
        if isinstance(loaded, dg.Definitions):
            return loaded
    defs = getattr(mod, "defs", None)
    if isinstance(defs, dg.Definitions):
        return defs
    return next((v for v in values if isinstance(v, dg.Definitions)), None)


def run_job(
    job_name: str,
    params: Optional[Mapping[str, Any]] = None,
    *,
    module: Optional[str] = None,
    partition_key: Optional[str] = None,
    instance: Optional[dg.DagsterInstance] = None,
    dagster_home: Optional[str] = None,
    tags: Optional[Mapping[str, str]] = None,
    quiet: bool = True,
    run_config: Optional[Mapping[str, Any]] = None,
    from_failure: Optional[str] = None,
    say: Optional[Callable[[str], None]] = None,
    full: bool = False,
) -> WorkflowRun:
    """Run job ``job_name`` of the code location ``module`` (default: the one ``dg`` loads for
    the project here, `code_location_module`) (a partition of a partitioned
    job), as a run of the instance the UI shows; params are ``{"Step.param": value}``, set over
    ``run_config``. ``quiet``: as in `run_workflow`.

    ``from_failure``: the id of a failed (or killed) run of this job to resume, as the UI's
    "Re-execute from failure" (see ``run_workflow``); its run config and partition are kept.
    The steps run where the job's executor puts them, as in the UI (a Ray or k8s executor's
    jobs or pods; ``say`` is told so before the run), except ``graphbook_executor``'s
    in-process mode: here. ``full``: the incremental steps recompute every note and refresh
    their store (docs/incremental.md).
    """
    instance = instance or get_instance(dagster_home)
    target = code_location_module(module)
    defs = load_code_location(target)
    job = _failures_unsaid(defs.resolve_job_def(job_name))
    tagged = _tagged_steps(job)
    run = _run(
        instance,
        job,
        f"job {job_name}",
        config=lambda: _job_config(job, tagged, params, partition_key, run_config),
        recon=lambda: dg.build_reconstructable_job(
            "dagster_graphbook.runner.run",
            "_reconstruct_location_job",
            reconstructable_args=(target.module, job_name),  # type: ignore[arg-type]  # as above
            reconstructor_working_directory=str(target.root),
        ),
        request=_Request(
            params,
            partition_key,
            run_config,
            _refresh_tags(tags, full),
            quiet,
            from_failure,
            say=say,
        ),  # fmt: skip
    )
    found = _materializations(instance, run.run_id)
    for key, m in found.items():
        run.metadata[key.to_user_string()] = {k: v.value for k, v in m.metadata.items()}
    pins = {key: (t.step, pin) for _, t in tagged for key, pin in t.pins.items()}
    run.notes = _stored_notes(found, [(key, *pins[key]) for key in found if key in pins])
    return run


def _job_config(
    job: dg.JobDefinition,
    tagged: List[Tuple[str, TaggedStep]],
    params: Optional[Mapping[str, Any]],
    partition_key: Optional[str],
    run_config: Optional[Mapping[str, Any]],
) -> Dict[str, Any]:
    """The run config of a code location job's run: ``run_config`` with ``{"Step.param":
    value}`` set over it."""
    if job.partitions_def is not None and partition_key is None:
        raise RequestError(
            f"{job_source(job)} is partitioned: give a partition key (--partition "
            f"{job.partitions_def.get_last_partition_key()}, the latest)"
        )
    targets: Dict[str, _ConfigTarget] = {  # resources, as in run_config_for; a step's name wins
        ref: ("resources", key, ()) for _, t in tagged for ref, key in t.resources.items()
    }
    targets.update(  # a step of a streaming op: under the one op's config
        (ref, ("ops", op, () if op == step.op_name else (step.op_name,)))
        for ref, (op, step) in resolve_refs((t.refs, (op, t)) for op, t in tagged).items()
    )

    def refused(key: str) -> Exception:
        steps = ", ".join(sorted(t.step for _, t in tagged))
        resources = sorted({r for _, t in tagged for r in t.resources})
        also = (
            f" (or RESOURCE.PARAM with RESOURCE one of {', '.join(resources)})" if resources else ""
        )
        return WorkflowError(
            job.name, [f"cannot set {key!r}: expected STEP.PARAM with STEP one of {steps}{also}"]
        )

    config = _with_params(run_config, _params_config(params or {}, targets, refused))
    return _request_config(config, job, partition_key, job_source(job))


def _reconstruct_location_job(module: str, job_name: str) -> dg.JobDefinition:
    """Rebuild job ``job_name`` of code location ``module`` (a resumed run's steps)."""
    return _failures_unsaid(load_code_location(module).resolve_job_def(job_name))


_RESUMABLE = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def _no_new_inputs(
    what: str,
    params: Optional[Mapping[str, Any]],
    partition_key: Optional[str],
    run_config: Optional[Mapping[str, Any]],
) -> None:
    given = [
        label
        for label, value in (
            ("parameters (--set)", params),
            ("partition key (--partition)", partition_key),
            ("run config", {k: v for k, v in (run_config or {}).items() if k != "loggers"}),
        )
        if value
    ]
    if given:
        raise RequestError(
            f"{what}: a run resumed from failure keeps the run config and partition of the run "
            f"it resumes; give no {', '.join(given)} with --from-failure (from_failure=)"
        )


def _parent_run(
    instance: dg.DagsterInstance, run_id: str, job: dg.JobDefinition, what: str
) -> dg.DagsterRun:
    """Run ``run_id`` if it is a failed run of ``job`` (``what``: the code the user named), else
    a RequestError saying why not. A run whose process was killed and that no later run has
    marked failed yet is marked now, so it can be resumed."""
    sweep_dead_runs(instance, _log.warning)
    run = instance.get_run_by_id(run_id)
    head = f"cannot resume run {run_id} of {what}"
    if run is None:
        failed = instance.get_runs(
            filters=dg.RunsFilter(job_name=job.name, statuses=list(_RESUMABLE)), limit=3
        )
        latest = f"\nthe latest failed runs of job {job.name} there: " if failed else ""
        raise RequestError(
            f"{head}: no such run in the instance at {instance.root_directory} (resume in the "
            f"instance it recorded into: the same --dagster-home, or --record)"
            f"{latest}{', '.join(r.run_id for r in failed)}"
        )
    if run.job_name != job.name:
        raise RequestError(
            f"{head}: it is a run of job {run.job_name!r}, not of {job.name!r}; name the "
            "workflow or job that run ran"
        )
    if run.status == dg.DagsterRunStatus.SUCCESS:
        raise RequestError(
            f"{head}: it succeeded, so there is nothing to resume; run it again without "
            "--from-failure to compute it anew"
        )
    if run.status not in _RESUMABLE:
        raise RequestError(
            f"{head}: it is still in progress ({run.status.value}); wait for it to end or stop "
            "it (a run killed outright is marked failed, then it can be resumed)"
        )
    missing = _steps_not_in(instance, run, job)
    if missing:
        raise RequestError(
            f"{head}: its steps {', '.join(missing)} are not in the job now (the workflow "
            "changed, or other --streaming/--stream-steps); resume with the code and flags it "
            "ran with, or run it again without --from-failure"
        )
    return run


def _steps_not_in(
    instance: dg.DagsterInstance, run: dg.DagsterRun, job: dg.JobDefinition
) -> List[str]:
    """The step keys of ``run``'s plan that ``job`` has no op for."""
    if run.execution_plan_snapshot_id is None:
        return []
    snapshot = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
    ours = {str(handle) for handle in job.graph.iterate_node_handles()}
    return sorted({s.key.split("[")[0] for s in snapshot.steps} - ours)


def _resume(
    recon: Any,
    instance: dg.DagsterInstance,
    parent: dg.DagsterRun,
    tags: Optional[Mapping[str, str]],
) -> Tuple[str, bool]:
    """Re-execute ``parent`` from failure, as the UI does: its steps that did not succeed run
    again (the IO manager reads the stored notes of the others from the parent's lineage), with
    its run config and tags (the partition). The job's executor (``graphbook_executor``) holds
    the new run's owner lock. Returns the new run's id and success."""
    run_tags = {k: v for k, v in parent.tags.items() if k not in TAGS_TO_MAYBE_OMIT_ON_RETRY}
    run_tags.update(_run_tags(tags))  # a token of its own
    run_tags[PARENT_RUN_ID_TAG] = parent.run_id
    run_tags[ROOT_RUN_ID_TAG] = parent.root_run_id or parent.run_id
    run_tags[RESUME_RETRY_TAG] = "true"
    options = dg.ReexecutionOptions.from_failure(parent.run_id, instance)
    with _backstop(instance, run_tags):
        # not opened as a context: that builds the job's resources again (a model load) for
        # outputs this function never reads
        result = dg.execute_job(
            recon, instance, tags=run_tags, reexecution_options=options, raise_on_error=False
        )
    return result.run_id, result.success


def _materializations(
    instance: dg.DagsterInstance, run_id: str
) -> Dict[dg.AssetKey, dg.AssetMaterialization]:
    """The materializations of run ``run_id`` and, for the assets it did not materialize, of the
    runs it re-executes (nearest first): a resumed run's outputs include the reused steps'."""
    found: Dict[dg.AssetKey, dg.AssetMaterialization] = {}
    for lineage_id in run_lineage(instance, run_id):
        records = instance.all_logs(lineage_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        found_in_run = (r.asset_materialization for r in records)
        ran = {m.asset_key: m for m in found_in_run if m is not None}  # None: other event types
        found = {**ran, **found}  # a run's last, the nearest run's first
    return found


def _tagged_steps(job: dg.JobDefinition) -> List[Tuple[str, TaggedStep]]:
    """``(op name, step)`` for every step the job's ops run, as their op tags name them."""
    return [
        (node.name, step) for node in job.graph.nodes for step in read_steps_tag(node_tags(node))
    ]


def _source_path(workflow: Any) -> str:
    if isinstance(workflow, Graph):
        if not workflow.module_name:
            raise ValueError(
                "the multiprocess and Ray executors rebuild the workflow in each step "
                "process: define the Graph in a file with @g()"
            )
        return workflow.module_name
    return str(Path(workflow).resolve())


def _load_notes(
    run_id: str, wdefs: Any, translator: GraphbookTranslator, instance: dg.DagsterInstance
) -> Dict[str, Dict[str, List[Any]]]:
    """The notes of every step of a workflow's run (an entry for each step; a pin inside a
    stream stores no notes)."""
    steps = list(translator.names(wdefs.workflow).steps.values())
    pins = [(spec.key, step.step, pin) for step in steps for pin, spec in step.specs.items()]
    stored = _stored_notes(_materializations(instance, run_id), pins)
    return {step.step: stored.get(step.step, {}) for step in steps}


def _stored_notes(
    found: Mapping[dg.AssetKey, dg.AssetMaterialization],
    pins: Iterable[Tuple[dg.AssetKey, str, str]],
) -> Dict[str, Dict[str, List[Any]]]:
    """Step -> pin -> notes, for each ``(asset key, step, pin)`` of ``pins`` (in that order) that
    a materialization in ``found`` (`_materializations`: this run's, or a resumed run's reused
    ones) stored notes of, read back through ``versions.read_notes`` from its ``dagster/uri``."""
    out: Dict[str, Dict[str, List[Any]]] = {}
    for key, step, pin in pins:
        materialization = found.get(key)
        if materialization is None:
            continue  # a pin inside a stream, or a step that did not run
        stored = stored_notes_path(materialization.metadata)
        if stored is not None:
            notes = read_notes(UPath(stored), key, materialization.partition)
            out.setdefault(step, {})[pin] = notes
    return out


def _finished_run(
    instance: dg.DagsterInstance, run_id: str, success: bool, start: float
) -> WorkflowRun:
    """The ``WorkflowRun`` of a run that ended (its notes are read by the caller)."""
    return WorkflowRun(
        run_id,
        success,
        time.perf_counter() - start,
        failure=None if success else _failure_message(instance, run_id),
        dagster_home=instance.root_directory,
    )


def _failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    """The errors of a failed run: its steps' failures, else what failed before any step ran
    (a refusal while a resource was built, an error of the run itself)."""
    messages: List[str] = []
    for record in instance.get_records_for_run(run_id, of_type=set(_RETURNED)).records:
        event = record.event_log_entry.dagster_event
        if event is None:
            continue
        data = event.event_specific_data
        error = getattr(data, "error", None)
        while (
            error is not None
            and error.cause is not None
            and (error.cls_name or "").startswith("Dagster")
        ):
            error = error.cause  # Dagster wraps the step's own error
        if error is None:
            continue
        where = f"{record.event_log_entry.step_key}: " if record.event_log_entry.step_key else ""
        message = f"{where}{_headline(data) or error.message.strip()}"
        said = (error.message.strip().splitlines() or [""])[0].split(": ", 1)[-1]  # no class
        repeated = any(said in m for m in messages)
        if event.event_type != dg.DagsterEventType.RUN_FAILURE or not repeated:
            messages.append(message)
    return "\n".join(messages) or "the run failed (see the Dagster event log)"


def _headline(data: Any) -> Optional[str]:
    """A ``GraphbookError``'s headline (as the UI shows it), then where it was raised (the full
    traceback stays in the event log)."""
    failure = getattr(data, "user_failure_data", None)
    if failure is None or not failure.description:
        return None
    tail = failure.metadata.get("traceback") if failure.metadata else None
    where = _raised_at(str(tail.value)) if tail else None
    return failure.description.strip() + (f"\n    at {where}" if where else "")


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')
# where a frame is not the user's: the standard library, installed packages, and this package
# wherever it lives (an editable install keeps it in the checkout, not in site-packages)
_LIBRARIES = tuple(
    os.path.join(os.path.realpath(path), "")
    for path in {sysconfig.get_path(p) for p in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # dagster_graphbook/
)


def _raised_at(traceback_text: str) -> Optional[str]:
    """``FILE, line N, in FUNC``: the innermost frame of the traceback in the user's code (not
    in this package, the standard library or installed packages), else the innermost."""
    frames = [m for m in map(_FRAME.match, traceback_text.splitlines()) if m]
    own = [
        m
        for m in frames
        if not m["file"].startswith("<") and not os.path.realpath(m["file"]).startswith(_LIBRARIES)
    ]
    found = (own or frames)[-1] if frames else None
    return f"{found['file']}, line {found['line']}, in {found['func']}" if found else None
