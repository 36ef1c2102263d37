"""Resuming a failed run from failure, as the UI's "Re-execute from failure"."""

from __future__ import annotations

import logging
from typing import Any, List, Mapping, Optional, Tuple

import dagster as dg

from ..dagster_internals import (
    PARENT_RUN_ID_TAG,
    RESUME_RETRY_TAG,
    ROOT_RUN_ID_TAG,
    TAGS_TO_MAYBE_OMIT_ON_RETRY,
)
from ..defs.executor import default_mode
from ..errors import RequestError
from ..execution import sweep_dead_runs
from .interrupts import backstop
from .tags import new_run_tags

_log = logging.getLogger("dagster_graphbook")


_RESUMABLE = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def no_new_inputs(
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


def parent_run(
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


def resume_run(
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
    run_tags.update(new_run_tags(tags))  # a token of its own
    run_tags[PARENT_RUN_ID_TAG] = parent.run_id
    run_tags[ROOT_RUN_ID_TAG] = parent.root_run_id or parent.run_id
    run_tags[RESUME_RETRY_TAG] = "true"
    options = dg.ReexecutionOptions.from_failure(parent.run_id, instance)
    with backstop(instance, run_tags):
        # not opened as a context: that builds the job's resources again (a model load) for
        # outputs this function never reads
        result = dg.execute_job(
            recon, instance, tags=run_tags, reexecution_options=options, raise_on_error=False
        )
    return result.run_id, result.success


def resumed_mode(job: dg.JobDefinition, parent: dg.DagsterRun) -> str:
    """Where a re-execution of ``parent`` runs its steps: ``graphbook_executor``'s mode as the
    parent's run config picked it, else the job's executor."""
    if job.executor_def.name != "graphbook_executor":
        return default_mode(job.executor_def)
    run_config: Mapping[str, Any] = parent.run_config or {}
    picked = (run_config.get("execution") or {}).get("config") or {}
    return next(iter(picked), None) or default_mode(job.executor_def)
