"""Run a workflow, or a code location's job, through Dagster from Python or the CLI."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

import dagster as dg

from ..authoring.graph import Graph, register_runner
from ..defs.definitions import GraphbookWorkflow
from ..defs.executor import MULTIPROCESS, default_mode, import_executor
from ..defs.instance import run_home
from ..errors import RequestError
from ..plan.translator import (
    GraphbookTranslator,
)
from .console import console_loggers, failures_unsaid
from .instance import get_instance
from .interrupts import backstop, execute_in_process
from .location import code_location_module, load_code_location
from .rebuild import OWN_EXECUTORS, left_unset, workflow_definitions, workflow_recon
from .results import WorkflowRun, finished_run, load_notes, materializations, stored_notes
from .resume import no_new_inputs, parent_run, resume_run, resumed_mode
from .run_config import job_config, tagged_steps, workflow_config
from .tags import new_run_tags, refresh_tags

_log = logging.getLogger("dagster_graphbook")


def run_workflow(
    workflow: Union[str, Path, Graph, GraphbookWorkflow],
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

    ``workflow``: a workflow file, a ``Graph``, or a whole ``GraphbookWorkflow`` (its options as
    the code location would build it: partitions, checks, tags; then give ``custom_nodes``,
    ``name``, ``streaming``, ``shards``, ``preview`` and ``runtime`` on it, not here).

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
        instance = get_instance(run_home(dagster_home, record))
    spec = _spec(
        workflow,
        executor,
        custom_nodes=[str(Path(p).resolve()) for p in custom_nodes],
        name=name,
        streaming=streaming,
        shards=shards,
        preview=preview,
        runtime=runtime,
        notes_dir=notes_dir,
    )
    translator = translator or GraphbookTranslator()
    defs, wdefs = workflow_definitions(spec, translator)
    job = defs.resolve_job_def(wdefs.job.name)
    run = _run(
        instance,
        job,
        f"workflow {wdefs.workflow.source}",
        config=lambda: workflow_config(
            wdefs, job, params, run_config, partition_key, spec.streaming, translator
        ),
        recon=lambda mode: workflow_recon(spec, translator, mode),
        request=_Request(
            params,
            partition_key,
            run_config,
            refresh_tags(tags, full),
            quiet,
            from_failure,
            executor,
            executor_config,
            say,
        ),
    )
    if run.success:
        run.notes = load_notes(run.run_id, wdefs, translator, instance)
    return run


def _spec(
    workflow: Union[str, Path, Graph, GraphbookWorkflow], executor: Optional[str], **given: Any
) -> GraphbookWorkflow:
    """``workflow`` as a ``GraphbookWorkflow``: the one given, or one of ``run_workflow``'s
    arguments; options given both ways are refused rather than one silently winning. A
    ``module:attr`` ``executor`` becomes the spec's (imported now, so a wrong one fails here)."""
    if isinstance(workflow, GraphbookWorkflow):
        twice = [k for k, v in given.items() if not left_unset(k, v)]
        if executor is not None and workflow.executor is not None:
            twice.append("executor")
        if twice:
            raise RequestError(
                f"run_workflow got a GraphbookWorkflow and {', '.join(twice)}: give "
                f"{'them' if len(twice) > 1 else 'it'} on the GraphbookWorkflow"
            )
        spec = workflow
    else:
        spec = GraphbookWorkflow(workflow, **given)
    if executor not in OWN_EXECUTORS:
        import_executor(executor)
        spec = replace(spec, executor=executor)
    return spec


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


def _run(
    instance: dg.DagsterInstance,
    job: dg.JobDefinition,
    what: str,
    config: Callable[[], Dict[str, Any]],
    recon: Callable[[str], Any],
    request: _Request,
) -> WorkflowRun:
    """The one run path of `run_workflow` and `run_job` (``what``: the code the user named):
    resume run ``request.from_failure``, or start a run of ``job`` with the run config
    ``config()`` (``--set`` params in it; refused before any run starts). ``recon(mode)``: the job
    rebuilt in whichever process runs a step (a resumed or multiprocess run). Returns the ended
    run, its notes not read yet."""
    start = time.perf_counter()
    if request.from_failure is not None:
        no_new_inputs(what, request.params, request.partition_key, request.run_config)
        parent = parent_run(instance, request.from_failure, job, what)
        mode = resumed_mode(job, parent)
        _say_where(request, what, job, mode)
        run_id, success = resume_run(recon(mode), instance, parent, request.tags)
        return finished_run(instance, run_id, success, start)
    run_config = config()
    if request.quiet:
        run_config.setdefault("loggers", console_loggers("WARNING"))
    run_tags = new_run_tags(request.tags)
    partition_key = request.partition_key
    mode = request.executor or default_mode(job.executor_def)
    _say_where(request, what, job, mode)
    if mode == "in_process":
        if job.executor_def.name == "graphbook_executor":  # recorded, so a resume is in process too
            run_config.setdefault("execution", {"config": {"in_process": {}}})
        result: Any = execute_in_process(job, instance, run_config, partition_key, run_tags)
    else:
        job_recon = recon(mode)
        if partition_key is not None:
            run_tags["dagster/partition"] = partition_key
        if mode == "multiprocess":  # graphbook_executor's mode
            run_config.setdefault("execution", {"config": dict(MULTIPROCESS)})
        elif request.executor_config is not None:  # a module:attr executor's run config
            run_config.setdefault("execution", {"config": dict(request.executor_config)})
        # else the job's own executor with the config it was defined with (.configured(...))
        with backstop(instance, run_tags):
            result = dg.execute_job(
                job_recon,
                instance=instance,
                run_config=run_config,
                tags=run_tags,
                raise_on_error=False,
            )
    return finished_run(instance, result.run_id, result.success, start)


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
    job = failures_unsaid(defs.resolve_job_def(job_name))
    tagged = tagged_steps(job)
    run = _run(
        instance,
        job,
        f"job {job_name}",
        config=lambda: job_config(job, tagged, params, partition_key, run_config),
        recon=lambda mode: dg.build_reconstructable_job(
            "dagster_graphbook.runner.location",
            "reconstruct_location_job",
            reconstructable_args=(target.module, job_name),  # type: ignore[arg-type]  # as above
            reconstructor_working_directory=str(target.root),
        ),
        request=_Request(
            params,
            partition_key,
            run_config,
            refresh_tags(tags, full),
            quiet,
            from_failure,
            say=say,
        ),  # fmt: skip
    )
    found = materializations(instance, run.run_id)
    for key, m in found.items():
        run.metadata[key.to_user_string()] = {k: v.value for k, v in m.metadata.items()}
    pins = {key: (t.step, pin) for _, t in tagged for key, pin in t.pins.items()}
    run.notes = stored_notes(found, [(key, *pins[key]) for key in found if key in pins])
    return run
