"""dagster-dask's executor with the two defects that break these workflows on Dask fixed.

- Partitioned runs failed ("Iteration is not allowed on `@record`
  TimeWindowPartitionsDefinition"): ``Client.submit`` walks every tuple among its arguments
  looking for futures, and Dagster's records (the run, the known state) are tuples that forbid
  iteration. Here the step's arguments travel sealed in one object Dask does not look into.
- Two runs of one job at once on one cluster: dagster-dask names each task ``<job>.<step>``, so
  the scheduler took the second run's tasks for the first run's (same key) and the second run
  "succeeded" without running a step. Here task keys carry the run id.

Same configuration as ``dagster_dask.dask_executor`` (``cluster: {existing: {address}}``,
``{local: {...}}``, ...) and the same ``dagster-dask/resource_requirements`` op tag; needs the
``distributed`` extra (``pip install 'dagster-graphbook[distributed]'``).
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Dict, Iterator, Mapping, Tuple, cast

import dagster as dg
import dask.distributed
from dagster_dask.executor import DaskExecutor, get_dask_resource_requirements, query_on_dask_worker
from dagster_dask.executor import dask_executor as _upstream

from ..dagster_internals import (
    ExecutionPlan,
    PlanOrchestrationContext,
    iterate_with_context,
    raise_execution_interrupts,
)

_CLUSTERS = {
    "local": "dask.distributed:LocalCluster",
    "ssh": "dask.distributed:SSHCluster",
    "yarn": "dask_yarn:YarnCluster",
    "pbs": "dask_jobqueue:PBSCluster",
    "moab": "dask_jobqueue:MoabCluster",
    "sge": "dask_jobqueue:SGECluster",
    "lsf": "dask_jobqueue:LSFCluster",
    "slurm": "dask_jobqueue:SLURMCluster",
    "oar": "dask_jobqueue:OARCluster",
    "kube": "dask_kubernetes:KubeCluster",
}


class _Sealed:
    """Arguments Dask ships as one pickled object instead of walking through them."""

    __slots__ = ("args",)

    def __init__(self, args: Tuple[Any, ...]):
        self.args = args


def _run_step(dependencies: Any, sealed: _Sealed) -> _Sealed:
    """On a Dask worker: run one step (``dependencies`` only orders the tasks). Its events go
    back sealed too: Dask's ``sizeof`` would walk them and log a warning for every result."""
    return _Sealed(tuple(query_on_dask_worker(dependencies, *sealed.args)))


class RunScopedDaskExecutor(DaskExecutor):
    """``DaskExecutor`` whose tasks are keyed by run and whose arguments are sealed."""

    def _cluster(self, job_name: str) -> Any:
        if self.cluster_type == "existing":
            return contextlib.nullcontext(self.cluster_configuration["address"])
        module, _, name = _CLUSTERS[self.cluster_type].partition(":")
        return getattr(importlib.import_module(module), name)(**self.build_dict(job_name))

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[dg.DagsterEvent]:
        instance = plan_context.instance
        if not instance.is_persistent:
            raise dg.DagsterInvariantViolationError(
                "Dask execution requires a persistent DagsterInstance"
            )
        run = plan_context.dagster_run
        with (
            self._cluster(plan_context.job_name) as cluster,
            dask.distributed.Client(cluster) as client,
        ):
            futures: Dict[str, Any] = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    deps = [
                        futures[key]
                        for step_input in step.step_inputs
                        for key in step_input.dependency_keys
                    ]
                    sealed = _Sealed(
                        (
                            plan_context.reconstructable_job,
                            run,
                            plan_context.run_config,
                            [step.key],
                            instance.get_ref(),
                            execution_plan.known_state,
                        )
                    )
                    futures[step.key] = client.submit(
                        _run_step,
                        deps,
                        sealed,
                        key=f"{plan_context.job_name}.{step.key}.{run.run_id}",
                        resources=get_dask_resource_requirements(step.tags),
                        pure=False,
                    )
            done = dask.distributed.as_completed(list(futures.values()), with_results=True)
            for _future, events in iterate_with_context(raise_execution_interrupts, done):
                yield from events.args


@dg.executor(
    name="dask",
    # dagster's overloads take no IDefinitionConfigSchema, which executor() itself accepts
    config_schema=_upstream.config_schema,  # type: ignore[call-overload]
    requirements=dg.multiple_process_executor_requirements(),
)
def dask_executor(init_context: dg.InitExecutorContext) -> RunScopedDaskExecutor:
    """dagster-dask's ``dask_executor``, safe for partitioned runs and concurrent runs."""
    cluster = cast(Mapping[str, Any], init_context.executor_config["cluster"])  # schema: a selector
    ((cluster_type, cluster_configuration),) = cluster.items()
    return RunScopedDaskExecutor(cluster_type, cluster_configuration)
