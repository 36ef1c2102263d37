"""dagster-ray's executor, with a step whose Ray job cannot be placed failing instead of waiting,
and the steps that ask the cluster for nothing run beside the run worker.

dagster-ray submits each step as a Ray job holding the step's ``dagster-ray/config`` resources
(``graphbook.ray.options(num_gpus=1)``). A job asking for what no node has stays PENDING, and the
run with it: no event after STEP_WORKER_STARTING until Ray's own job start timeout (15 minutes).
Here:

- a step that asks the cluster for nothing (``on_cluster``: no GPU, CPU, memory or custom
  resource, no runtime_env of its own, from its ``dagster-ray/config`` tag or the executor's
  config; a source listing, a sharded step's plan and commit) runs in a process forked beside
  the run worker from its preloaded forkserver (``beside.ForkedSteps``), not as a Ray job,
  whose process start (Python, Dagster, torch, the code location) cost about 5 s a step on the
  critical path. The op tag ``dagster-graphbook/on-cluster`` (``true``/``false``; an empty
  ``graphbook.ray.options()`` on the class sets ``true``) overrides the rule per step, and
  ``light_steps_on_cluster: true`` in the executor's config sends every step to the cluster.

- before a step's job is submitted, what it asks for is compared with the cluster's nodes. Where
  no node has it and the cluster cannot grow (no autoscaler: a cluster of ``ray start`` nodes,
  which Ray's read-only node provider reports), the step fails at once, naming what it asked for
  and what each node has; nothing is submitted.
- otherwise (an autoscaler may add a node; the nodes that have it are busy) a job still PENDING
  after ``placement_timeout_s`` is stopped and its step fails, saying the same.
- the process orchestrating the run holds its run-owner lock (``dead_runs.own_run``), as under
  ``graphbook_executor``: killed while a step waits, its run is marked failed by the next run
  instead of staying STARTED; a job Ray places after that skips its step (the run has ended).
- a head whose job server does not answer (refused, timed out, a 5xx reply: dagster-ray let
  requests' errors through to Dagster's executor, which logged them every 20 s and waited for
  ever) is waited for at most ``head_lost_timeout_s`` from its first unanswered request: a
  launch waits, a health check passes; past it each of the run's steps on it fails with
  ``RayHeadLostError`` naming its address and the resume. Dagster's executor checks its steps
  every ``health_check_interval_s`` (20 s, Dagster's default), so a run whose head is gone ends
  within ``head_lost_timeout_s`` + twice that.

Same configuration as ``dagster_ray.ray_executor`` (``ray: {address, env_vars, ...}``, retries)
plus ``placement_timeout_s``, ``head_lost_timeout_s``, ``health_check_interval_s`` and
``light_steps_on_cluster``; what ``graphbook.ray.RayExecutor`` runs with. Needs the ``ray``
extra.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Set, Tuple

import dagster as dg
import requests
from dagster_ray.configs import RayExecutionConfig
from dagster_ray.core.executor import _RAY_EXECUTOR_CONFIG_SCHEMA, RayStepHandler
from dagster_ray.core.executor import ray_executor as _upstream
from dagster_ray.utils import resolve_env_vars_list
from ray.job_submission import JobDetails, JobStatus, JobSubmissionClient

from ..dagster_internals import (
    CheckStepHealthResult,
    SerializableErrorInfo,
    StepFailureData,
    StepHandler,
    StepHandlerContext,
)
from ..defs.executor import OwnedExecutor
from ..errors import RayHeadLostError
from ..plan.gpus import ON_CLUSTER_TAG
from .beside import ForkedSteps

# how long a step's Ray job may wait to be placed (an autoscaler adding a GPU node takes minutes)
PLACEMENT_TIMEOUT_S = 600.0
# how long the head may not answer before the run's steps on it fail: past Ray's own 60 s
# (gcs_rpc_server_reconnect_timeout_s), after which the other nodes give up on a head and end
# their work, so a head back within a minute (a network blip, a head with GCS fault tolerance
# restarted) keeps the run and a head gone for good fails it in about two minutes
HEAD_LOST_TIMEOUT_S = 90.0
HEALTH_CHECK_INTERVAL_S = 20  # Dagster's StepDelegatingExecutor's default
_REQUEST_TIMEOUT_S = 15.0  # one request to the job server, which answers in milliseconds
_HEAD_POLL_S = 2.0  # between the requests of a launch waiting for the head
_GIB = 1024**3


class _NoAnswer(Exception):
    """The head's job server did not answer a request: refused, timed out, or a 5xx reply."""


def _request(client: JobSubmissionClient, method: str, endpoint: str) -> requests.Response:
    """``client``'s request with a timeout; ``_NoAnswer`` where the head did not answer."""
    try:
        reply = client._do_request(method, endpoint, timeout=_REQUEST_TIMEOUT_S)
    except requests.RequestException as exc:
        raise _NoAnswer(type(exc).__name__) from exc
    if reply.status_code >= 500:  # its job server up, its GCS not (or a proxy's gateway error)
        raise _NoAnswer(f"HTTP {reply.status_code}")
    return reply


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
            rows = _request(client, "GET", "/api/v0/nodes?detail=1").json()
            status = _request(client, "GET", "/api/cluster_status").json()
            nodes = [
                (row["node_ip"], row["resources_total"])
                for row in rows["data"]["result"]["result"]
                if row["state"] == "ALIVE"
            ]
        except Exception:  # no answer, a reply of another shape
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


def on_cluster(ray: RayStepHandler, tags: Mapping[str, Any], light_steps_on_cluster: bool) -> bool:
    """Whether a step runs as a Ray job (else beside the run worker): its
    ``dagster-graphbook/on-cluster`` tag where it has one; else whether it asks the cluster for
    anything (``requested``: GPUs, CPUs, memory, custom resources) or needs the cluster's
    environment (a ``runtime_env`` of its own, or the executor's beyond ``env_vars``: pip,
    working_dir, containers), or the executor sends every step there."""
    said = tags.get(ON_CLUSTER_TAG)
    if said is not None:
        return str(said).strip().lower() not in ("false", "0", "no", "")
    if light_steps_on_cluster or requested(ray, tags):
        return True
    own_env = RayExecutionConfig.from_tags({**tags}).runtime_env
    return bool(own_env) or bool(set(ray.runtime_env) - {"env_vars"})


def job_env(ray: RayStepHandler) -> Dict[str, str]:
    """The variables the executor gives each step's Ray job (``runtime_env``'s ``env_vars``,
    then ``env_vars``), as dagster-ray's ``launch_step`` sets them."""
    return {**(ray.runtime_env.get("env_vars") or {}), **resolve_env_vars_list(ray.env_vars)}


class PlacedRayStepHandler(StepHandler):
    """dagster-ray's step handler (``ray``), checking that each step's Ray job can be placed
    before submitting it and while it waits, and that the head answers (module docstring)."""

    def __init__(
        self,
        ray: RayStepHandler,
        placement_timeout_s: float,
        head_lost_timeout_s: float = HEAD_LOST_TIMEOUT_S,
        light_steps_on_cluster: bool = False,
    ) -> None:
        super().__init__()
        self.ray = ray
        self.placement_timeout_s = placement_timeout_s
        self.head_lost_timeout_s = head_lost_timeout_s
        self.light_steps_on_cluster = light_steps_on_cluster
        self.beside = ForkedSteps(job_env(ray))  # the steps that ask the cluster for nothing
        self._ended: Set[str] = set()  # submission ids whose step failed here (its failure logged)
        # when the head first did not answer since it last did (time.monotonic()), and how
        self._silent_since: Optional[float] = None
        self._silence = ""

    @property
    def name(self) -> str:
        return self.ray.name

    @property
    def address(self) -> str:
        return self.ray.client.get_address()

    def _what(self, ctx: StepHandlerContext) -> Tuple[str, str, Dict[str, float]]:
        """(step key, submission id, what its job asks for)."""
        key = self.ray._get_step_key(ctx)
        return (
            key,
            self.ray._get_ray_job_submission_id(ctx),
            requested(self.ray, ctx.step_tags[key]),
        )

    def _beside(self, ctx: StepHandlerContext) -> Optional[str]:
        """The step's key where it runs beside the run worker (``on_cluster``), else None."""
        key = self.ray._get_step_key(ctx)
        tags = ctx.step_tags[key]
        return None if on_cluster(self.ray, tags, self.light_steps_on_cluster) else key

    def runs_beside(self, execution_plan: Any) -> bool:
        """Whether a step of ``execution_plan`` that this run executes runs beside the run
        worker."""
        steps = (execution_plan.get_step_by_key(k) for k in execution_plan.step_keys_to_execute)
        return any(
            not on_cluster(self.ray, step.tags or {}, self.light_steps_on_cluster) for step in steps
        )

    def _head(self, ctx: StepHandlerContext, key: str, request: Mapping[str, float]) -> str:
        return (
            f"job {ctx.dagster_run.job_name}, step {key}: its Ray job asks for "
            f"{_amounts(request)}, which no node of the Ray cluster at {self.address} has"
        )

    def _job(self, submission: str) -> Optional[JobDetails]:
        """The job's details from the head, None where it has no such job; ``_NoAnswer``."""
        reply = _request(self.ray.client, "GET", f"/api/jobs/{submission}")
        self._silent_since = None  # it answered
        if reply.status_code == 404:
            return None
        if reply.status_code != 200:
            self.ray.client._raise_error(reply)  # RuntimeError, as the client's own calls
        return JobDetails(**reply.json())

    def _unheard(self, ctx: StepHandlerContext, key: str, cause: _NoAnswer) -> float:
        """Seconds the head has not answered, from its first unanswered request (logged)."""
        now = time.monotonic()
        self._silence = str(cause)
        if self._silent_since is None:
            self._silent_since = now
            dg.DagsterEvent.engine_event(
                ctx.get_step_context(key),
                f"the Ray head at {self.address} does not answer ({cause}): the run's steps "
                "on it wait for it, and fail if it has not answered within head_lost_timeout_s "
                f"{self.head_lost_timeout_s:g} s",
            )
        return now - self._silent_since

    def _lost(
        self, ctx: StepHandlerContext, key: str, submission: str, silent_s: float, job_is: str
    ) -> dg.DagsterEvent:
        """The step's failure, the head silent past ``head_lost_timeout_s`` (logged now);
        ``job_is``: what became of its Ray job."""
        job, run = ctx.dagster_run.job_name, ctx.dagster_run.run_id
        error = RayHeadLostError(
            f"job {job}, step {key}: the Ray head at {self.address} has not answered for "
            f"{silent_s:.0f} s (head_lost_timeout_s {self.head_lost_timeout_s:g} s; last try: "
            f"{self._silence}): the step's Ray job {submission} {job_is}. Start the head "
            'again, then resume the run: the UI\'s "Re-execute from failure", '
            f"`dagster-graphbook materialize {job} --from-failure {run}` (a code location's "
            f"job) or `dagster-graphbook run WORKFLOW --from-failure {run}` (a workflow file)",
            address=self.address,
            step=key,
            run_id=run,
            silent_s=silent_s,
        )
        self._ended.add(submission)
        name = type(error).__name__
        info = SerializableErrorInfo(message=f"{name}: {error}\n", stack=[], cls_name=name)
        return dg.DagsterEvent.step_failure_event(
            ctx.get_step_context(key), StepFailureData(error=info, user_failure_data=None)
        )

    def launch_step(self, step_handler_context: StepHandlerContext) -> Iterator[dg.DagsterEvent]:
        ctx = step_handler_context
        beside = self._beside(ctx)
        if beside is not None:
            yield from self.beside.launch(ctx, beside)
            return
        key, submission, request = self._what(ctx)
        while True:  # the head answers, or its silence is past head_lost_timeout_s
            try:
                self._job(submission)
                break
            except _NoAnswer as exc:
                silent = self._unheard(ctx, key, exc)
            if silent > self.head_lost_timeout_s:
                yield self._lost(ctx, key, submission, silent, "was not submitted")
                return
            time.sleep(min(_HEAD_POLL_S, self.head_lost_timeout_s - silent + 0.1))
        cluster = _Cluster.read(self.ray.client) if request else None
        if cluster is not None and not cluster.fits(request):
            step = ctx.get_step_context(key)
            head = f"{self._head(ctx, key, request)} ({cluster.describe()})"
            if cluster.fixed:
                self._ended.add(submission)
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
        try:
            yield from self.ray.launch_step(ctx)
        except requests.RequestException as exc:  # gone since it answered: its checks wait
            self._unheard(ctx, key, _NoAnswer(type(exc).__name__))

    def check_step_health(self, step_handler_context: StepHandlerContext) -> CheckStepHealthResult:
        ctx = step_handler_context
        beside = self._beside(ctx)
        if beside is not None:
            return self.beside.health(ctx, beside)
        key, submission, request = self._what(ctx)
        if submission in self._ended:  # failed here; its failure is on its way
            return CheckStepHealthResult.healthy()
        try:
            return self._health(ctx, key, submission, request)
        except _NoAnswer as exc:
            silent = self._unheard(ctx, key, exc)
        if silent > self.head_lost_timeout_s:
            self._lost(ctx, key, submission, silent, "is taken as lost")  # logged: read back
        return CheckStepHealthResult.healthy()

    def _health(
        self, ctx: StepHandlerContext, key: str, submission: str, request: Mapping[str, float]
    ) -> CheckStepHealthResult:
        """dagster-ray's check (no such job, a FAILED job) and the placement timeout."""
        info = self._job(submission)
        if info is None:
            return CheckStepHealthResult.unhealthy(
                reason=(
                    f"Ray job {submission} for step {key} could not be found on the Ray cluster "
                    f"at {self.address} (a head started again has no jobs of the one before it, "
                    "unless it keeps them in GCS fault tolerance's Redis)"
                )
            )
        waited = time.time() - (info.start_time or 0) / 1000  # set when submitted
        if info.status == JobStatus.PENDING and waited > self.placement_timeout_s:
            _request(self.ray.client, "POST", f"/api/jobs/{submission}/stop")  # placed later:
            cluster = _Cluster.read(self.ray.client)  # it stops (and skips the step)
            nodes = cluster.describe() if cluster is not None else "its nodes could not be read"
            return CheckStepHealthResult.unhealthy(
                reason=(
                    f"job {ctx.dagster_run.job_name}, step {key}: its Ray job {submission} was "
                    f"not placed within placement_timeout_s {self.placement_timeout_s:g} s (it "
                    f"asks for {_amounts(request) or 'nothing'}; the cluster's nodes: {nodes}); "
                    "it was stopped"
                )
            )
        if info.status == JobStatus.FAILED:  # dagster-ray's words
            reason = f"Discovered failed Ray job {submission} for step {key}."
            if info.error_type:
                reason += f" Error type: {info.error_type}."
            if info.message:
                reason += f" Message: {info.message}."
            return CheckStepHealthResult.unhealthy(reason=reason)
        return CheckStepHealthResult.healthy()

    def terminate_step(self, step_handler_context: StepHandlerContext) -> Iterator[dg.DagsterEvent]:
        ctx = step_handler_context
        beside = self._beside(ctx)
        if beside is not None:
            yield from self.beside.terminate(ctx, beside)
            return
        key, submission, _ = self._what(ctx)
        if submission in self._ended:  # failed here: never submitted, or its head gone
            return
        try:
            yield from self.ray.terminate_step(ctx)
        except requests.RequestException as exc:
            yield dg.DagsterEvent.engine_event(
                ctx.get_step_context(key),
                f"Ray job {submission} of step {key} was not stopped: the Ray head at "
                f"{self.address} did not answer ({type(exc).__name__}). A head that is gone "
                f"took its jobs with it; else `ray job stop --address {self.address} "
                f"{submission}`",
            )


class _OwnedRayExecutor(OwnedExecutor):
    """dagster-ray's executor, owned (``OwnedExecutor``); the server its light steps fork from
    started at once (``handler``'s, unless every step is a Ray job), and ended with the run."""

    def __init__(self, inner: Any, handler: PlacedRayStepHandler) -> None:
        super().__init__(inner)
        self.handler = handler

    def prepare(self, plan_context: Any, execution_plan: Any) -> Tuple[Any, Any]:
        if self.handler.runs_beside(execution_plan):
            self.handler.beside.warm_up(plan_context.instance)
        return plan_context, execution_plan

    def finish(self) -> None:  # no step forked beside the run worker outlives its run
        self.handler.beside.end()


@dg.executor(
    name="ray",
    config_schema={
        **_RAY_EXECUTOR_CONFIG_SCHEMA,
        "placement_timeout_s": dg.Field(
            float,
            default_value=PLACEMENT_TIMEOUT_S,
            description="Seconds a step's Ray job may wait to be placed before its step fails",
        ),
        "head_lost_timeout_s": dg.Field(
            float,
            default_value=HEAD_LOST_TIMEOUT_S,
            description=(
                "Seconds the Ray head may not answer (a blip, a restart) before the run's steps "
                "on it fail, naming it"
            ),
        ),
        "health_check_interval_s": dg.Field(
            int,
            default_value=HEALTH_CHECK_INTERVAL_S,
            description=(
                "Seconds between the executor's checks of each running step's Ray job (Dagster's "
                "default: 20): how soon a failed job or a lost head is seen"
            ),
        ),
        "light_steps_on_cluster": dg.Field(
            bool,
            default_value=False,
            description=(
                "Run every step as a Ray job. By default a step that asks the cluster for "
                "nothing (no GPU, CPU, memory or custom resource, no runtime_env of its own) runs "
                "in a process forked beside the run worker; the op tag "
                "dagster-graphbook/on-cluster (true/false) decides per step"
            ),
        ),
    },
    requirements=dg.multiple_process_executor_requirements(),
)
def ray_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """dagster-ray's ``ray_executor`` whose steps fail when their Ray job cannot be placed: at
    once on a cluster without an autoscaler where no node has what the step asks for, else after
    ``placement_timeout_s`` in PENDING (the job stopped); and when the head has not answered for
    ``head_lost_timeout_s``. A step asking the cluster for nothing runs beside the run worker
    (``on_cluster``). Its run owned by this process."""
    creation = _upstream.executor_creation_fn
    assert creation is not None
    executor: Any = creation(init_context)  # dagster-ray's StepDelegatingExecutor, configured
    config: Mapping[str, Any] = init_context.executor_config
    handler = PlacedRayStepHandler(
        executor._step_handler,
        config["placement_timeout_s"],
        config["head_lost_timeout_s"],
        config["light_steps_on_cluster"],
    )
    executor._step_handler = handler
    # dagster-ray builds the StepDelegatingExecutor without it: Dagster's 20 s then
    executor._check_step_health_interval_seconds = config["health_check_interval_s"]
    return _OwnedRayExecutor(executor, handler)
