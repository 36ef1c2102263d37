"""dagster-ray's executor, with a step whose Ray job cannot be placed failing instead of waiting.

dagster-ray submits each step as a Ray job holding the step's ``dagster-ray/config`` resources
(``graphbook.ray.options(num_gpus=1)``). A job asking for what no node has stays PENDING, and the
run with it: no event after STEP_WORKER_STARTING until Ray's own job start timeout (15 minutes).
Here:

- before a step's job is submitted, what it asks for is compared with the cluster's nodes. Where
  no node has it and the cluster cannot grow (no autoscaler: a cluster of ``ray start`` nodes,
  which Ray's read-only node provider reports), the step fails at once, naming what it asked for
  and what each node has; nothing is submitted.
- otherwise (an autoscaler may add a node; the nodes that have it are busy) a job still PENDING
  after ``placement_timeout_s`` is stopped and its step fails, saying the same.
- the process orchestrating the run holds its run-owner lock (``dead_runs.own_run``), as under
  ``graphbook_executor``: killed while a step waits, its run is marked failed by the next run
  instead of staying STARTED; a job Ray places after that skips its step (the run has ended).

Same configuration as ``dagster_ray.ray_executor`` (``ray: {address, env_vars, ...}``, retries)
plus ``placement_timeout_s``; what ``graphbook.ray.RayExecutor`` runs with. Needs the ``ray``
extra.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Set, Tuple

import dagster as dg
from dagster_ray.configs import RayExecutionConfig
from dagster_ray.core.executor import _RAY_EXECUTOR_CONFIG_SCHEMA, RayStepHandler
from dagster_ray.core.executor import ray_executor as _upstream
from ray.job_submission import JobStatus, JobSubmissionClient

from ..dagster_internals import (
    CheckStepHealthResult,
    SerializableErrorInfo,
    StepFailureData,
    StepHandler,
    StepHandlerContext,
)
from ..execution.ownership.dead_runs import own_run

# how long a step's Ray job may wait to be placed (an autoscaler adding a GPU node takes minutes)
PLACEMENT_TIMEOUT_S = 600.0
_GIB = 1024**3


@dataclass
class _Cluster:
    """The alive nodes of a Ray cluster (address, resources) and whether it can add nodes."""

    nodes: List[Tuple[str, Dict[str, float]]]
    fixed: bool

    @classmethod
    def read(cls, client: JobSubmissionClient) -> Optional[_Cluster]:
        """From the job server's state API and autoscaler status; None where it cannot say (an
        older or locked-down job server): then the job is submitted and the timeout holds."""
        try:
            rows = client._do_request("GET", "/api/v0/nodes?detail=1").json()
            status = client._do_request("GET", "/api/cluster_status").json()
            nodes = [
                (row["node_ip"], row["resources_total"])
                for row in rows["data"]["result"]["result"]
                if row["state"] == "ALIVE"
            ]
        except Exception:  # requests' errors, a reply of another shape
            return None
        report = ((status.get("data") or {}).get("clusterStatus") or {}).get("autoscalerReport")
        mapping = (report or {}).get("nodeTypeMapping") or {}
        # Ray's read-only node provider (a cluster of `ray start` nodes) names each node's type
        # after the node (`node_<id>`) and launches none; any other autoscaler may add nodes
        fixed = bool(mapping) and all(kind == f"node_{node}" for node, kind in mapping.items())
        return cls(nodes, fixed)

    def fits(self, request: Mapping[str, float]) -> bool:
        return any(
            all(have.get(k, 0.0) >= amount for k, amount in request.items())
            for _, have in self.nodes
        )

    def describe(self) -> str:
        if not self.nodes:
            return "no alive node"
        shown = (
            f"{ip}: {_amounts({k: v for k, v in have.items() if not _internal(k)}) or 'nothing'}"
            for ip, have in self.nodes
        )
        return "; ".join(shown)


def _internal(resource: str) -> bool:
    """Resources Ray gives every node (its address, the object store), not asked for by jobs."""
    return resource.startswith("node:") or resource == "object_store_memory"


def _amounts(resources: Mapping[str, float]) -> str:
    return ", ".join(
        f"memory {v / _GIB:.1f} GiB" if k == "memory" else f"{k} {v:g}"
        for k, v in sorted(resources.items())
    )


def requested(ray: RayStepHandler, tags: Mapping[str, Any]) -> Dict[str, float]:
    """The Ray resources a step's job asks for, as dagster-ray's ``launch_step`` passes them
    (the executor's config first, then the op's ``dagster-ray/config`` tag)."""
    user = RayExecutionConfig.from_tags({**tags})
    amounts = {
        "CPU": ray.num_cpus or user.num_cpus,
        "GPU": ray.num_gpus or user.num_gpus,
        "memory": ray.memory or user.memory,
        **(ray.resources or {}),
        **(user.resources or {}),
    }
    return {k: float(v) for k, v in amounts.items() if v}


class PlacedRayStepHandler(StepHandler):
    """dagster-ray's step handler (``ray``), checking that each step's Ray job can be placed
    before submitting it and while it waits (module docstring)."""

    def __init__(self, ray: RayStepHandler, placement_timeout_s: float) -> None:
        super().__init__()
        self.ray = ray
        self.placement_timeout_s = placement_timeout_s
        self._refused: Set[str] = set()  # submission ids never submitted (their step failed)

    @property
    def name(self) -> str:
        return self.ray.name

    def _what(self, ctx: StepHandlerContext) -> Tuple[str, str, Dict[str, float]]:
        """(step key, submission id, what its job asks for)."""
        key = self.ray._get_step_key(ctx)
        return (
            key,
            self.ray._get_ray_job_submission_id(ctx),
            requested(self.ray, ctx.step_tags[key]),
        )

    def _head(self, ctx: StepHandlerContext, key: str, request: Mapping[str, float]) -> str:
        return (
            f"job {ctx.dagster_run.job_name}, step {key}: its Ray job asks for "
            f"{_amounts(request)}, which no node of the Ray cluster at "
            f"{self.ray.client.get_address()} has"
        )

    def launch_step(self, step_handler_context: StepHandlerContext) -> Iterator[dg.DagsterEvent]:
        ctx = step_handler_context
        key, submission, request = self._what(ctx)
        cluster = _Cluster.read(self.ray.client) if request else None
        if cluster is not None and not cluster.fits(request):
            step = ctx.get_step_context(key)
            head = f"{self._head(ctx, key, request)} ({cluster.describe()})"
            if cluster.fixed:
                self._refused.add(submission)
                message = (
                    f"{head}, and the cluster has no autoscaler to add one: the job was not "
                    "submitted. Ask for what a node has (graphbook.ray.options, the op's "
                    "dagster-ray/config tag) or add a node that has it (`ray start "
                    "--address=<head> --num-gpus=N`)"
                )
                error = SerializableErrorInfo(message=message, stack=[], cls_name=None)
                yield dg.DagsterEvent.step_failure_event(
                    step, StepFailureData(error=error, user_failure_data=None)
                )
                return
            yield dg.DagsterEvent.engine_event(
                step,
                f"{head} now: its job waits for the cluster's autoscaler to add one, at most "
                f"placement_timeout_s {self.placement_timeout_s:g} s",
            )
        yield from self.ray.launch_step(ctx)

    def check_step_health(self, step_handler_context: StepHandlerContext) -> CheckStepHealthResult:
        ctx = step_handler_context
        key, submission, request = self._what(ctx)
        if submission in self._refused:  # failed at launch; its failure is on its way
            return CheckStepHealthResult.healthy()
        try:
            info = self.ray.client.get_job_info(submission)
        except RuntimeError:  # no such job: dagster-ray's check says so
            return self.ray.check_step_health(ctx)
        waited = time.time() - (info.start_time or 0) / 1000  # set when submitted
        if info.status == JobStatus.PENDING and waited > self.placement_timeout_s:
            self.ray.client.stop_job(submission)  # a job placed later stops (and skips the step)
            cluster = _Cluster.read(self.ray.client)
            nodes = cluster.describe() if cluster is not None else "its nodes could not be read"
            return CheckStepHealthResult.unhealthy(
                reason=(
                    f"job {ctx.dagster_run.job_name}, step {key}: its Ray job {submission} was "
                    f"not placed within placement_timeout_s {self.placement_timeout_s:g} s (it "
                    f"asks for {_amounts(request) or 'nothing'}; the cluster's nodes: {nodes}); "
                    "it was stopped"
                )
            )
        return self.ray.check_step_health(ctx)

    def terminate_step(self, step_handler_context: StepHandlerContext) -> Iterator[dg.DagsterEvent]:
        yield from self.ray.terminate_step(step_handler_context)


class _OwnedExecutor(dg.Executor):
    """dagster-ray's executor, run while this process holds the run's owner lock."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
        with own_run(plan_context.instance, plan_context.run_id, plan_context.log.warning):
            yield from self.inner.execute(plan_context, execution_plan)

    @property
    def retries(self) -> Any:
        return self.inner.retries

    @property
    def step_dependency_config(self) -> Any:
        return self.inner.step_dependency_config


@dg.executor(
    name="ray",
    config_schema={
        **_RAY_EXECUTOR_CONFIG_SCHEMA,
        "placement_timeout_s": dg.Field(
            float,
            default_value=PLACEMENT_TIMEOUT_S,
            description="Seconds a step's Ray job may wait to be placed before its step fails",
        ),
    },
    requirements=dg.multiple_process_executor_requirements(),
)
def ray_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """dagster-ray's ``ray_executor`` whose steps fail when their Ray job cannot be placed: at
    once on a cluster without an autoscaler where no node has what the step asks for, else after
    ``placement_timeout_s`` in PENDING (the job stopped); its run owned by this process."""
    creation = _upstream.executor_creation_fn
    assert creation is not None
    executor: Any = creation(init_context)  # dagster-ray's StepDelegatingExecutor, configured
    timeout: float = init_context.executor_config["placement_timeout_s"]  # type: ignore[assignment]
    executor._step_handler = PlacedRayStepHandler(executor._step_handler, timeout)
    return _OwnedExecutor(executor)
