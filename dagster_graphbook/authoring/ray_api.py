"""``graphbook.ray``: Graphbook 0.13.3's Ray API, run through Dagster with dagster-ray.

``@options(num_gpus=1)`` on a step or resource records Ray's options on the class
(``Ray_Options``, as Graphbook does); the plan turns them into the op's ``dagster-ray/config`` tag,
the GPU requests of the other executors and the ``gpu`` pool. ``g.run(executor=RayExecutor(...))``
runs the workflow's job with dagster-ray's executor on that Ray cluster: each step a Ray job. So a
Graphbook program written for Ray runs here unchanged, with Dagster's run history and assets.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from typing import Any, Callable, Dict, List, Optional, TypeVar

try:
    import dagster_ray  # noqa: F401  (the executor ``run_options`` names)
    import ray
    from ray.job_submission import JobSubmissionClient
except ImportError as exc:  # the message Graphbook gives, for this package's extra
    raise ImportError(
        f"graphbook.ray needs Ray and dagster-ray ({exc.name or exc} could not be imported). "
        "You can install all required dependencies with `pip install dagster-graphbook[ray]`"
    ) from exc

from .decorators import class_attributes
from .executors import Executor

__all__ = ["init", "remote", "options", "is_graphbook_ray_initialized", "RayExecutor"]

logger = logging.getLogger("dagster_graphbook")
T = TypeVar("T")

# the Dagster executor a RayExecutor's runs use (dagster-ray's, failing a step whose Ray job
# cannot be placed), as run_workflow imports it in each step process
RAY_EXECUTOR_PATH = "dagster_graphbook.integrations.ray:ray_executor"
# ray.init arguments a Ray job takes; the others size or tune a Ray started here
_JOB_INIT_ARGS = frozenset({"address", "runtime_env"})
_initialized = False


def init(*, host: str = "0.0.0.0", port: int = 8005) -> None:
    """Connect this process to Ray, as Graphbook's ``init`` does (``ray.init()``: ``RAY_ADDRESS``,
    else the cluster ``ray start`` made on this machine, else a new local one).

    Graphbook's web server (``host``, ``port``) is not started: runs show in the Dagster UI.
    """
    global _initialized
    if not ray.is_initialized():
        ray.init()
    _initialized = True


def is_graphbook_ray_initialized() -> bool:
    """Whether ``init`` (or a ``RayExecutor`` without an address) connected this process."""
    return ray.is_initialized() and _initialized


def options(**kwargs: Any) -> Callable[[T], T]:
    """Ray options for a step or resource (``num_gpus``, ``num_cpus``, ``memory``,
    ``resources``, ``runtime_env``, ``accelerator_type``), stored on the class as
    ``Ray_Options`` like Graphbook; they become the op's ``dagster-ray/config`` (a resource's
    apply to the steps using it, in whose process it is built). Works on a class and below
    ``@step``/``@resource``. Ray checks the options here, not when the run starts.

    Examples:
        .. code-block:: python

            @step("RayStep")
            @options(num_cpus=2, num_gpus=1)
            def my_ray_step(ctx, data):
                data["value"] = predict(...)
    """
    try:
        ray.remote(_OptionsProbe).options(**kwargs)  # Ray's own check of actor options
    except (TypeError, ValueError) as exc:
        raise ValueError(f"graphbook.ray.options({_call(kwargs)}): {exc}") from None
    return class_attributes(Ray_Options=dict(kwargs))


class _OptionsProbe:
    """A class for ``ray.remote`` to check ``options`` against (no actor is made)."""


def remote(*args: Any, **kwargs: Any) -> Any:
    """Graphbook's hand-built Ray DAGs (``remote(MyStep).remote(...).bind(...)``) are not run here.

    Ray would run them outside Dagster, with no assets or run history. Put the class in a
    ``Graph`` and run it with ``g.run(executor=RayExecutor(...))``; give its Ray options with
    ``@options(...)``.
    """
    what = getattr(args[0], "__name__", repr(args[0])) if args else "a class"
    raise NotImplementedError(
        f"graphbook.ray.remote({what}) builds a Ray DAG by hand, which Ray runs outside Dagster; "
        f"dagster-graphbook runs Graphbook graphs as Dagster jobs: add {what} to a Graph "
        "(g.step / g.resource) and call g.run(executor=graphbook.ray.RayExecutor(...)), with its "
        "Ray options in @graphbook.ray.options(...)"
    )


class RayExecutor(Executor):
    """Runs a workflow's steps on a Ray cluster, each as a Ray job (dagster-ray's executor).

    ``init_args`` are ``ray.init``'s, as in Graphbook: ``address`` is the cluster (a
    ``ray://host:10001`` client address, the head's ``host:6379``, ``auto``, or the job server's
    ``http://host:8265``); ``runtime_env`` is the steps' runtime environment. Without an address,
    ``ray.init(**init_args)`` connects to ``RAY_ADDRESS`` or this machine's cluster, or starts
    one, as Graphbook's RayExecutor did. The cluster needs its job server (``ray[default]``),
    this package, the graph's file and ``dagster`` on its ``PATH``, and reads the Dagster instance
    and notes this process uses (docs/deploying.md). ``log_dir`` (Graphbook's log folder) is not
    used: runs are in the Dagster instance.
    """

    def __init__(self, log_dir: str = "logs", **init_args: Any) -> None:
        self.log_dir = log_dir
        self.init_args = dict(init_args)
        self.env_vars: List[str] = []
        address: Optional[str] = init_args.get("address")
        if address is None:
            global _initialized
            if not ray.is_initialized():
                ray.init(**init_args)
            _initialized = True
            address = ray.get_runtime_context().gcs_address
            if "RAY_ADDRESS" not in os.environ:  # a cluster of this machine: find `dagster`
                self.env_vars = _path_with_dagster()
        else:
            unused = sorted(set(init_args) - _JOB_INIT_ARGS)
            if unused:
                logger.warning(
                    "RayExecutor: ray.init arguments %s are not used: steps run as Ray jobs on "
                    "the existing cluster at %s",
                    ", ".join(unused),
                    address,
                )
        self.address = _job_server(address)

    def run_options(self) -> Dict[str, Any]:
        """dagster-ray's executor, configured for this cluster (``run_workflow``'s arguments)."""
        ray_config: Dict[str, Any] = {"address": self.address, "env_vars": list(self.env_vars)}
        if self.init_args.get("runtime_env"):
            ray_config["runtime_env"] = self.init_args["runtime_env"]
        return {"executor": RAY_EXECUTOR_PATH, "executor_config": {"ray": ray_config}}

    def run(self, graph: Any, name: str, step_id: Optional[str] = None) -> Any:
        return graph.run(executor=self, step_id=step_id)


def _job_server(address: str) -> str:
    """The HTTP address of the Ray job server of the cluster at ``address``, checked now (as
    ``ray.init`` would have failed in Graphbook) rather than when the run's first step starts."""
    try:
        return JobSubmissionClient(address).get_address()
    except Exception as exc:  # requests' ConnectionError, Ray's RpcError for a GCS address, ...
        raise ConnectionError(
            f"RayExecutor: no Ray job server found for address {address!r} ({exc}). Start the "
            "cluster with its dashboard (`ray start --head`, from ray[default]) and give its "
            "address, e.g. RayExecutor(address='http://<head>:8265')"
        ) from exc


def _path_with_dagster() -> List[str]:
    """``["PATH=..."]`` with this interpreter's scripts folder, where the Ray job's entrypoint
    (``dagster api execute_step``) would not find ``dagster`` (a venv that is not activated)."""
    scripts = os.path.dirname(sys.executable)
    if shutil.which("dagster") or not os.path.exists(os.path.join(scripts, "dagster")):
        return []
    return [f"PATH={os.pathsep.join([scripts, os.environ.get('PATH', '')])}"]


def _call(kwargs: Dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
