"""The executor of workflow jobs: in one process unless a run (or the workflow) asks for more.

Dagster's default executor starts a process per step, and each step process imports torch,
rebuilds the code location and its resources (the model) before doing any work: the nightly demo
took 3.2x longer from the Launchpad than from the terminal. ``graphbook_executor`` has the same
two modes as Dagster's default (``execution: {config: {in_process: {}}}`` or
``{multiprocess: {...}}``, chosen per run in the Launchpad) but defaults to ``in_process``;
``GraphbookWorkflow(executor="multiprocess")`` makes one process per step the workflow's default.

The process orchestrating the run holds its run-owner lock (``dead_runs.own_run``) while the
steps execute, so a run worker killed from outside is found dead by the next run.
"""

from __future__ import annotations

import os
import subprocess
from multiprocessing import forkserver
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import dagster as dg

from ..dagster_internals import sleep_between_slot_claims
from ..execution import own_run
from ..model.workflow import WorkflowError
from ..plan.job_steps import job_source, placeholder_message, runtime_problems, unfilled_in_job
from ..store.io_manager import NOTES_DIR_META, in_process_memory
from .reexecution import complete_plan

_DAGSTER_DEFAULT = dg.multi_or_in_process_executor  # multiprocess unless the run config says
sleep_between_slot_claims()  # a run waiting for a pool's slot: no busy loop (dagster_internals)
# executors that never run mapped steps (dagster-dask skips them silently): no sharded step there
_NO_MAPPED_STEPS = frozenset({"dask"})
_MAPPING_EXECUTORS = (
    "graphbook_executor (the default), multiprocess, in_process, k8s_job_executor, "
    "docker_executor, celery_executor or dagster-ray's ray_executor"
)


# one process per step, each forked from a server that imported the package and torch once:
# Dagster's default (spawn) imports them again in every step process, seconds per step. The
# instance's storage (SQLAlchemy, alembic, which every step process opens) and pandas (sink
# tables) too: without them each step process spent about 1 s of CPU importing them.
PRELOAD = ["dagster_graphbook", "torch", "dagster._core.storage.sqlite_storage", "pandas"]
MULTIPROCESS: Dict[str, Any] = {
    "multiprocess": {"start_method": {"forkserver": {"preload_modules": PRELOAD}}}
}


def _graphbook_executor(default: Mapping[str, Any]) -> dg.ExecutorDefinition:
    mode = next(iter(default))

    @dg.executor(
        name="graphbook_executor",
        config_schema=dg.Field(
            _DAGSTER_DEFAULT.config_schema.config_type,
            default_value=dict(default),
            description="in_process: every step in the run's process, the model loaded once; "
            "multiprocess: one process per step (parallel branches and shards, isolation). "
            f"Default here: {mode}",
        ),
        requirements=_DAGSTER_DEFAULT.get_requirements,
    )
    def graphbook_executor(init_context: dg.InitExecutorContext) -> Any:
        """Dagster's ``multi_or_in_process_executor`` with in-process as its default (a model is
        loaded once per run), run while this process owns the run."""
        create = _DAGSTER_DEFAULT.executor_creation_fn
        assert create is not None  # Dagster's default executor has one
        context = _preloading(init_context)
        chosen: Any = context.executor_config.get("multiprocess")
        if chosen is not None:
            resource_tracker_of_its_own()
        if "forkserver" in ((chosen or {}).get("start_method") or {}):
            forkserver_with_this_environment()
        multiprocess = "multiprocess" in context.executor_config
        return _CompletingExecutor(create(context), owned=True, multiprocess=multiprocess)

    return graphbook_executor


_FORKSERVER_ENV: Optional[Dict[str, str]] = None  # os.environ when this process's server started


def forkserver_with_this_environment() -> None:
    """Restart this process's forkserver when ``os.environ`` changed since it started: step
    processes fork from it and see its environment, so a script or test running several runs in
    one process would otherwise give later runs' steps the first run's variables."""
    global _FORKSERVER_ENV
    server = forkserver._forkserver  # CPython's one server per process (3.8-3.13)
    env = dict(os.environ)
    if getattr(server, "_forkserver_pid", None) is not None and _FORKSERVER_ENV != env:
        # changed since, or started by other code before (environment and preloads unknown)
        server._stop()  # type: ignore[attr-defined]  # used by CPython's own tests
    _FORKSERVER_ENV = env


_TRACKER: List[subprocess.Popen] = []  # this process's resource tracker, when started here


def resource_tracker_of_its_own() -> None:
    """Start this process's multiprocessing resource tracker in a session of its own, before the
    step processes (and the forkserver, which hands the tracker on to each) need it.

    The tracker is the stdlib's cleanup of the named semaphores (``/dev/shm/sem.mp-*``) that
    step processes and their loader pools make: it unlinks those left when every process using
    it has died. Started by the forkserver as usual, it was in the run's process group, so a
    ``kill -9 -PGID`` of the run took it along and the semaphores stayed for good. A tracker
    already running (other code started it first) is kept."""
    from multiprocessing import resource_tracker, spawn, util

    tracker: Any = resource_tracker._resource_tracker  # CPython's one tracker (3.8-3.13)
    with tracker._lock:
        if tracker._fd is not None:
            return
        read, write = os.pipe()
        command = f"from multiprocessing.resource_tracker import main;main({read})"
        try:
            flags = util._args_from_interpreter_flags()  # type: ignore[attr-defined]
            args = [spawn.get_executable(), *flags, "-c", command]
            _TRACKER.append(subprocess.Popen(args, pass_fds=(read,), start_new_session=True))
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        # what ResourceTracker.ensure_running records of the tracker it starts
        tracker._fd, tracker._pid = write, _TRACKER[-1].pid


def _preloading(context: dg.InitExecutorContext) -> dg.InitExecutorContext:
    """``multiprocess`` picked in the launchpad without a ``start_method``: the step processes
    fork from the preloaded forkserver too (``MULTIPROCESS``), not Dagster's spawn, which imports
    torch and this package again in each of them. A ``start_method`` the run names is kept."""
    chosen = context.executor_config.get("multiprocess")
    if not isinstance(chosen, Mapping) or chosen.get("start_method"):
        return context
    config = {**context.executor_config, "multiprocess": {**chosen, **MULTIPROCESS["multiprocess"]}}
    return context._replace(executor_config=config)


graphbook_executor = _graphbook_executor({"in_process": {}})
# a job with a sharded step: its shards in parallel by default, from the terminal and the UI alike
_SHARDED_DEFAULT = _graphbook_executor(MULTIPROCESS)


def default_mode(executor_def: dg.ExecutorDefinition) -> str:
    """How a run that names no executor runs a job with this executor: ``in_process`` or
    ``multiprocess`` (``graphbook_executor``'s default mode; ``in_process`` for Dagster's
    in-process executor), else ``job``: the executor itself (multiprocess, Ray, k8s, Dask), as
    the UI and the schedule run it; never quietly in the caller's process instead."""
    if executor_def.name == "in_process":
        return "in_process"
    if executor_def.name != "graphbook_executor":
        return "job"
    default = executor_def.config_schema.as_field().default_value
    return "multiprocess" if "multiprocess" in default else "in_process"


def steps_in_one_process(executor_def: dg.ExecutorDefinition) -> bool:
    """Whether a run that names no executor config runs every step in the run's own process
    (``graphbook_executor`` in its in-process mode, Dagster's ``in_process_executor``), rather
    than a process (a pod, a Ray or Dask task) per step."""
    if executor_def.name == "graphbook_executor":
        return default_mode(executor_def) == "in_process"
    return executor_def.name == "in_process"


IN_MEMORY_NOTES = (
    "is an in-memory store (fsspec's memory://), which only the process that wrote the notes "
    "can read, and {why}: a step would not find its parents' notes. Use a folder or an object "
    "store (s3://, gs://, ...) as notes_dir, or run the steps in one process ({how})"
)


def in_memory_notes_dirs(job: dg.JobDefinition) -> List[str]:
    """The ``memory://`` notes_dirs of the job's assets (from their definition metadata)."""
    graph = job.asset_layer.asset_graph if job.asset_layer else None
    if graph is None:
        return []
    found = set()
    for key in graph.get_all_asset_keys():
        notes_dir = (graph.get(key).metadata or {}).get(NOTES_DIR_META)
        notes_dir = getattr(notes_dir, "value", notes_dir)
        if isinstance(notes_dir, str) and in_process_memory(notes_dir):
            found.add(notes_dir)
    return sorted(found)


class OwnedExecutor(dg.Executor):
    """An executor (``inner``) run while this process holds the run's owner lock (``owned``):
    the one wrapper of Dagster's, k8s's and Ray's executors. ``prepare`` and ``finish`` are
    what a wrapper adds before the run's steps start and after they end."""

    def __init__(self, inner: dg.Executor, owned: bool = True) -> None:
        self.inner = inner
        self.owned = owned

    def prepare(self, plan_context: Any, execution_plan: Any) -> Tuple[Any, Any]:
        return plan_context, execution_plan

    def finish(self) -> None:
        return None

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[Any]:
        plan_context, execution_plan = self.prepare(plan_context, execution_plan)
        try:
            if not self.owned:
                yield from self.inner.execute(plan_context, execution_plan)
                return
            with own_run(plan_context.instance, plan_context.run_id, plan_context.log.warning):
                yield from self.inner.execute(plan_context, execution_plan)
        finally:
            self.finish()

    @property
    def retries(self) -> Any:
        return self.inner.retries

    @property
    def step_dependency_config(self) -> Any:
        return self.inner.step_dependency_config


class _CompletingExecutor(OwnedExecutor):
    """Dagster's executor, owned, with the shards Dagster leaves out of a from-failure run added
    to it, and a run refused before any step starts where it could not go right."""

    def __init__(self, inner: dg.Executor, owned: bool, multiprocess: bool = False) -> None:
        super().__init__(inner, owned)
        self.multiprocess = multiprocess  # graphbook_executor's mode of this run

    def prepare(self, plan_context: Any, execution_plan: Any) -> Tuple[Any, Any]:
        plan_context, execution_plan, added = complete_plan(plan_context, execution_plan)
        if added:
            plan_context.log.info(
                f"re-execution from failure: also running {', '.join(added)}, which never ran "
                "in an earlier run (their step's commit needs every shard)"
            )
        _refuse_before_start(plan_context, execution_plan)
        if self.multiprocess:
            _refuse_in_memory_notes(plan_context.job.get_definition())
        return plan_context, execution_plan


def _completing(executor_def: dg.ExecutorDefinition) -> dg.ExecutorDefinition:
    """A user's executor (a Dagster, k8s or Ray one) that also runs never-run shards on a
    re-execution from failure; its name, config and requirements unchanged."""
    create = executor_def.executor_creation_fn
    assert create is not None  # a definition without one cannot run a job
    return dg.ExecutorDefinition(
        name=executor_def.name,
        config_schema=executor_def.config_schema,  # type: ignore[arg-type]  # a definition's, as is
        executor_creation_fn=lambda init_context: _CompletingExecutor(create(init_context), False),
        description=executor_def.description,
        requirements=executor_def.get_requirements,
    )


def _refuse_in_memory_notes(job: dg.JobDefinition) -> None:
    """Fail a run that picked the multiprocess mode (the Launchpad's ``execution`` config) of a
    job whose notes live in one process's memory, before any step (the load refuses such a
    workflow whose own executor runs steps apart)."""
    found = in_memory_notes_dirs(job)
    if found:
        why = "this run's execution config picks multiprocess (a process per step)"
        said = IN_MEMORY_NOTES.format(why=why, how="execution: in_process, the default")
        raise dg.Failure(
            description=f"{job_source(job)}: notes_dir {found[0]!r} {said}", allow_retries=False
        )


def _refuse_before_start(plan_context: Any, execution_plan: Any) -> None:
    """Fail a run at its start, before any step, when its config could never run: a step
    parameter holds ``{partition_key}`` and the run has no partition key (a step would read or
    write a literal '{partition_key}' path), or a step's ``runtime`` block is impossible
    (``shards: 0``); the step itself refuses too, under any other executor."""
    job = plan_context.job.get_definition()
    resolved = dg.validate_run_config(job, plan_context.run_config)
    problems = runtime_problems(job, resolved)
    if problems:
        said = "; ".join(f"{k}: {v}" for k, v in problems.items())
        raise dg.Failure(description=f"{job_source(job)}: {said}", allow_retries=False)
    if "dagster/partition" in plan_context.dagster_run.tags:  # a run of one partition
        return
    # a step key's top-level node: "wf__S", "wf__S.wf__S__shard[shard_0]" (a sharded step's graph)
    ops = {key.split(".")[0].split("[")[0] for key in execution_plan.step_keys_to_execute}
    found = unfilled_in_job(job, resolved, ops)
    if found:
        message = placeholder_message(found, job.partitions_def is not None)
        raise dg.Failure(description=f"{job_source(job)}: {message}", allow_retries=False)


def resolve_executor(
    choice: Union[None, str, dg.ExecutorDefinition],
    source: str = "<workflow>",
    sharded: Sequence[str] = (),
) -> dg.ExecutorDefinition:
    """The executor a workflow's job gets: ``None`` -> ``graphbook_executor`` (multiprocess by
    default when the job has ``sharded`` steps), a name -> Dagster's executor of that name,
    ``MODULE:ATTR`` -> the ``ExecutorDefinition`` it names, an ``ExecutorDefinition`` (e.g.
    ``k8s_job_executor``) as given; with sharded steps, each runs never-run shards on a
    re-execution from failure.

    Raises ``WorkflowError`` naming the workflow file ``source`` for an unknown name, and for an
    executor that cannot run a sharded step's mapped shard ops.
    """
    if choice is None:
        return _SHARDED_DEFAULT if sharded else graphbook_executor
    executors = {"in_process": dg.in_process_executor, "multiprocess": dg.multiprocess_executor}
    if isinstance(choice, str) and ":" in choice:  # module:attr (YAML's way to name Ray's)
        try:
            choice = import_executor(choice)
        except ValueError as exc:
            raise WorkflowError(source, [str(exc)]) from exc
    if isinstance(choice, str) and choice not in executors:
        raise WorkflowError(
            source,
            [
                f"executor must be one of {', '.join(executors)} or MODULE:ATTR naming an "
                f"ExecutorDefinition, got {choice!r}"
            ],
        )
    chosen = executors[choice] if isinstance(choice, str) else choice
    if not sharded or chosen is graphbook_executor:
        return chosen
    if chosen.name in _NO_MAPPED_STEPS:
        raise WorkflowError(
            source,
            [
                f"step {', '.join(map(repr, sharded))} is sharded, but the {chosen.name!r} "
                "executor never runs mapped steps (its shards would silently not run): use "
                f"{_MAPPING_EXECUTORS}, or drop shards"
            ],
        )
    return _completing(chosen)


def import_executor(path: str) -> dg.ExecutorDefinition:
    """The ``ExecutorDefinition`` at ``module:attr`` (``dagster_ray:ray_executor``): a run's
    executor named so each step process that rebuilds the job imports the same one."""
    import importlib

    module, sep, attr = path.partition(":")
    try:
        if not sep or not attr:
            raise ValueError("expected MODULE:ATTR, e.g. dagster_ray:ray_executor")
        found: Any = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(
            f"executor must be 'in_process', 'multiprocess' or MODULE:ATTR naming an "
            f"ExecutorDefinition; {path!r}: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(found, dg.ExecutorDefinition):
        raise ValueError(
            f"executor {path!r} is a {type(found).__name__}, not an ExecutorDefinition"
        )
    return found
