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

from typing import Any, Iterator, Union

import dagster as dg

from ..execution.dead_runs import own_run
from ..model.workflow import WorkflowError
from ..plan.job_steps import job_source, placeholder_message, unfilled_in_job

_DAGSTER_DEFAULT = dg.multi_or_in_process_executor  # multiprocess unless the run config says


@dg.executor(
    name="graphbook_executor",
    config_schema=dg.Field(
        _DAGSTER_DEFAULT.config_schema.config_type,
        default_value={"in_process": {}},
        description="in_process (default): every step in the run's process, the model loaded "
        "once; multiprocess: one process per step (parallel branches, isolation)",
    ),
    requirements=_DAGSTER_DEFAULT.get_requirements,
)
def graphbook_executor(init_context: dg.InitExecutorContext) -> Any:
    """Dagster's ``multi_or_in_process_executor`` with in-process as its default (a model is
    loaded once per run), run while this process owns the run."""
    create = _DAGSTER_DEFAULT.executor_creation_fn
    assert create is not None  # Dagster's default executor has one
    return _OwnedExecutor(create(init_context))


class _OwnedExecutor(dg.Executor):
    """Dagster's executor, run while this process holds the run's owner lock."""

    def __init__(self, inner: dg.Executor) -> None:
        self.inner = inner

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[Any]:
        _refuse_unfilled_placeholders(plan_context, execution_plan)
        with own_run(plan_context.instance, plan_context.run_id, plan_context.log.warning):
            yield from self.inner.execute(plan_context, execution_plan)

    @property
    def retries(self) -> Any:
        return self.inner.retries

    @property
    def step_dependency_config(self) -> Any:
        return self.inner.step_dependency_config


def _refuse_unfilled_placeholders(plan_context: Any, execution_plan: Any) -> None:
    """Fail a run with no partition key at its start, before any step, when a step parameter it
    runs holds ``{partition_key}`` (a step would read or write a literal '{partition_key}'
    path); the step itself refuses too, under any other executor."""
    if "dagster/partition" in plan_context.dagster_run.tags:  # a run of one partition
        return
    job = plan_context.job.get_definition()
    ops = {key.split("[")[0] for key in execution_plan.step_keys_to_execute}
    found = unfilled_in_job(job, dg.validate_run_config(job, plan_context.run_config), ops)
    if found:
        message = placeholder_message(found, job.partitions_def is not None)
        raise dg.Failure(description=f"{job_source(job)}: {message}", allow_retries=False)


def resolve_executor(
    choice: Union[None, str, dg.ExecutorDefinition], source: str = "<workflow>"
) -> dg.ExecutorDefinition:
    """The executor a workflow's job gets: ``None`` -> ``graphbook_executor``, a name -> Dagster's
    executor of that name, an ``ExecutorDefinition`` (e.g. ``k8s_job_executor``) as given.

    Raises ``WorkflowError`` naming the workflow file ``source`` for an unknown name.
    """
    if choice is None:
        return graphbook_executor
    if isinstance(choice, dg.ExecutorDefinition):
        return choice
    executors = {"in_process": dg.in_process_executor, "multiprocess": dg.multiprocess_executor}
    if choice not in executors:
        raise WorkflowError(
            source, [f"executor must be one of {', '.join(executors)}, got {choice!r}"]
        )
    return executors[choice]


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
