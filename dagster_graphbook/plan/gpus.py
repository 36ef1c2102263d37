"""GPU requests: one setting (``gpus: N`` per workflow or step) as the op tags executors read.

- Kubernetes (``k8s_job_executor``, ``K8sRunLauncher``): ``dagster-k8s/config`` container limits
  ``nvidia.com/gpu`` (the NVIDIA device plugin's resource name);
- Ray (``dagster-ray``'s executor): ``dagster-ray/config`` ``num_gpus``;
- Dask (``dagster-dask``'s executor): ``dagster-dask/resource_requirements`` ``{"GPU": N}``, which
  needs workers started with ``--resources GPU=<n>``.

On one machine, each shard of a sharded step leases this many GPUs (default 1) for its process
(``execution/leases.py``, docs/sharding.md).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Union

from ..model.workflow import Workflow, WorkflowError
from .refs import resolve_per_step

GpuSetting = Union[None, int, Mapping[str, int]]


def gpu_op_tags(gpus: int) -> Dict[str, Any]:
    """The op tags requesting ``gpus`` GPUs on Kubernetes, Ray and Dask ({} for 0)."""
    if gpus <= 0:
        return {}
    return {
        "dagster-k8s/config": {
            "container_config": {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        },
        "dagster-ray/config": {"num_gpus": gpus},
        "dagster-dask/resource_requirements": {"GPU": gpus},
    }


# the op tags ``gpu_op_tags`` writes: what an op that needs no GPU must not carry
GPU_TAG_KEYS = frozenset(gpu_op_tags(1))


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
