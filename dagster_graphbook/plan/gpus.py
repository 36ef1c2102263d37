"""GPU and Ray requests: one setting (``gpus: N`` per workflow or step) and Graphbook's
``@graphbook.ray.options(...)`` on step and resource classes, as the op tags executors read.

- Kubernetes (``k8s_job_executor``, ``K8sRunLauncher``): ``dagster-k8s/config`` container limits
  ``nvidia.com/gpu`` (the NVIDIA device plugin's resource name);
- Ray (``dagster-ray``'s executor): ``dagster-ray/config`` ``num_gpus`` and the other Ray options
  a step's Ray job takes (``num_cpus``, ``memory``, ``resources``, ``runtime_env``); an empty
  ``graphbook.ray.options()`` puts the step on the cluster (``ON_CLUSTER_TAG``: this package's
  Ray executor runs a step asking for nothing beside the run worker, integrations/ray.py);
- Dask (``dagster-dask``'s executor): ``dagster-dask/resource_requirements`` ``{"GPU": N}``, which
  needs workers started with ``--resources GPU=<n>``.

On one machine, each shard of a sharded step leases this many GPUs (default 1) for its process
(``execution/ownership/leases.py``, docs/sharding.md).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ..model.workflow import Workflow, WorkflowError, WorkflowNode
from .refs import resolve_per_step

GpuSetting = Union[None, int, Mapping[str, int]]

# the class attribute ``graphbook.ray.options`` sets (Graphbook 0.13.3's name for it)
RAY_OPTIONS_ATTR = "Ray_Options"
# Ray actor options a step's Ray job takes (dagster-ray's op config); ``accelerator_type`` becomes
# a custom resource as Ray itself does; the other actor options (restarts, concurrency, names,
# placement) have no meaning for a step that runs as a job, and are said so at load
_RAY_AMOUNTS = ("num_gpus", "num_cpus", "memory")
_RAY_JOB_OPTIONS = frozenset(_RAY_AMOUNTS + ("resources", "runtime_env", "accelerator_type"))
# the op tag saying whether a step runs as a Ray job ("true") or beside the run worker ("false")
# on dagster_graphbook.integrations.ray's executor, whatever it asks for
ON_CLUSTER_TAG = "dagster-graphbook/on-cluster"


def gpu_op_tags(gpus: float, ray: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The op tags requesting ``gpus`` GPUs on Kubernetes, Ray and Dask ({} for 0), with the
    other dagster-ray options ``ray`` (``num_cpus``, ...) in the Ray tag. Kubernetes counts whole
    GPUs: a fraction (Ray's ``num_gpus=0.5``) asks it for one."""
    tags: Dict[str, Any] = {}
    if gpus > 0:
        tags = {
            "dagster-k8s/config": {
                "container_config": {
                    "resources": {"limits": {"nvidia.com/gpu": str(math.ceil(gpus))}}
                }
            },
            "dagster-ray/config": {"num_gpus": gpus},
            "dagster-dask/resource_requirements": {"GPU": gpus},
        }
    if ray:
        tags["dagster-ray/config"] = {**ray, **tags.get("dagster-ray/config", {})}
    return tags


# where ``gpu_op_tags`` writes a GPU request, in each tag: what an op needing no GPU must not carry
_GPU_ENTRIES = {
    "dagster-k8s/config": ("container_config", "resources", "limits", "nvidia.com/gpu"),
    "dagster-ray/config": ("num_gpus",),
    "dagster-dask/resource_requirements": ("GPU",),
}


def merged_tags(*layers: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Op tags layered, later ones winning entry by entry inside mappings: a workflow's
    ``op_tags={"dagster-k8s/config": {...secrets...}}`` keeps the step's GPU limit beside it."""
    out: Dict[str, Any] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            old = out.get(key)
            both = isinstance(old, Mapping) and isinstance(value, Mapping)
            out[key] = merged_tags(old, value) if both else value
    return out


def without_gpus(tags: Mapping[str, Any]) -> Dict[str, Any]:
    """``tags`` less their GPU requests, and nothing else: a plan or commit op of a sharded
    step keeps the workflow's k8s settings (secrets, volumes, image) and Ray options."""
    out: Dict[str, Any] = {}
    for key, value in tags.items():
        path = _GPU_ENTRIES.get(key)
        if path is not None and isinstance(value, Mapping):
            value = _drop(value, path)
            if not value:
                continue
        out[key] = value
    return out


def _drop(tree: Mapping[str, Any], path: Tuple[str, ...]) -> Dict[str, Any]:
    """A copy of ``tree`` without the entry at ``path``, and without the mappings left empty."""
    copy = dict(tree)
    head, rest = path[0], path[1:]
    if head in copy:
        if rest and isinstance(copy[head], Mapping):
            copy[head] = _drop(copy[head], rest)
            if not copy[head]:
                del copy[head]
        elif not rest:
            del copy[head]
    return copy


def resolve_gpus(
    workflow: Workflow, setting: GpuSetting, step_names: Mapping[str, str]
) -> Dict[str, int]:
    """Node id -> GPUs. An int applies to every batch step; a mapping names steps (step name,
    label, class name or node id). Unknown steps and negative counts are load errors."""
    return resolve_per_step(
        workflow, "gpus", setting, step_names, _checked_count(workflow), "number"
    )


def _checked_count(workflow: Workflow) -> Callable[[str, Any], int]:
    def check(where: str, count: Any) -> int:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise WorkflowError(
                workflow.source,
                [f"{where} must be a whole number of GPUs (0 or more), got {count!r}"],
            )
        return count

    return check


def step_request(workflow: Workflow, node: WorkflowNode) -> Tuple[float, Dict[str, Any]]:
    """``(GPUs, other dagster-ray options)`` the op of step ``node`` asks for: the Ray options
    of its class and of the resources it uses (built in the step's process, so the step asks for
    the largest of each amount), the workflow's ``gpus=`` winning over their ``num_gpus``."""
    found = [_options(workflow, n) for n in _with_resources(workflow, node)]
    ray: Dict[str, Any] = {}
    for key in _RAY_AMOUNTS:
        amounts = [o[key] for o in found if o.get(key) is not None]
        if amounts:
            ray[key] = max(amounts)
    resources: Dict[str, float] = {}
    for options in found:
        for name, amount in _resources(options).items():
            resources[name] = max(amount, resources.get(name, 0))
    if resources:
        ray["resources"] = resources
    runtime_env = next((o["runtime_env"] for o in found if o.get("runtime_env")), None)
    if runtime_env:
        ray["runtime_env"] = runtime_env
    gpus = ray.pop("num_gpus", 0)
    return workflow.gpus.get(node.id, gpus), ray


def step_op_tags(workflow: Workflow, node: WorkflowNode) -> Dict[str, Any]:
    """The GPU and Ray op tags of step ``node`` (``step_request`` as ``gpu_op_tags``); a class
    (or a resource it uses) with Ray options that ask for nothing (``graphbook.ray.options()``)
    goes on the cluster all the same (``ON_CLUSTER_TAG``)."""
    tags = gpu_op_tags(*step_request(workflow, node))
    marked = any(
        getattr(n.cls, RAY_OPTIONS_ATTR, None) is not None for n in _with_resources(workflow, node)
    )
    if marked and "dagster-ray/config" not in tags:
        tags[ON_CLUSTER_TAG] = "true"
    return tags


def ray_option_notices(workflow: Workflow) -> List[str]:
    """What the workflow's ``graphbook.ray.options`` ask that a step run as a Ray job cannot
    do (actor options: restarts, concurrency, names), one line per node."""
    notices = []
    for node in workflow.nodes.values():
        ignored = sorted(set(_options(workflow, node)) - _RAY_JOB_OPTIONS)
        if ignored:
            notices.append(
                f"{node.describe()}: Ray option(s) {', '.join(ignored)} of {node.name} are Ray "
                "actor options, not applied (a step runs as a Ray job, its resources in it)"
            )
    return notices


def _with_resources(workflow: Workflow, node: WorkflowNode) -> List[WorkflowNode]:
    """``node`` and the resource nodes it uses, directly or through other resources."""
    seen: Dict[str, WorkflowNode] = {}
    todo = [node]
    while todo:
        current = todo.pop()
        if current.id not in seen:
            seen[current.id] = current
            todo += [workflow.nodes[i] for i in current.resource_params.values()]
    return list(seen.values())


def _options(workflow: Workflow, node: WorkflowNode) -> Dict[str, Any]:
    """The node class's Ray options, checked where the plan reads them (a class may set
    ``Ray_Options`` by hand, without ``graphbook.ray.options``'s check)."""
    options = getattr(node.cls, RAY_OPTIONS_ATTR, None) or {}
    if not isinstance(options, Mapping):
        raise WorkflowError(
            workflow.source,
            [f"{node.describe()}: {node.name}.{RAY_OPTIONS_ATTR} must be a dict, got {options!r}"],
        )
    for key in _RAY_AMOUNTS:
        amount = options.get(key)
        if amount is not None and (
            isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0
        ):
            raise WorkflowError(
                workflow.source,
                [f"{node.describe()}: Ray option {key} must be a number >= 0, not {amount!r}"],
            )
    return dict(options)


def _resources(options: Mapping[str, Any]) -> Dict[str, float]:
    """The custom Ray resources ``options`` ask for; ``accelerator_type="A100"`` as Ray turns it
    into one (``accelerator_type:A100``, 0.001)."""
    resources = dict(options.get("resources") or {})
    if options.get("accelerator_type"):
        resources[f"accelerator_type:{options['accelerator_type']}"] = 0.001
    return resources
