"""Jobs rebuilt on Dask workers / in Ray jobs (``dg.build_reconstructable_job`` points here)."""

from __future__ import annotations

import os
from typing import Sequence

import dagster as dg

from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions

# the days of a partitioned job here (a test running one of its days in one process uses it too)
DAILY = daily_partitions("2026-01-01")


def job(
    executor: str,
    address: str,
    workflow: str,
    custom_nodes: Sequence[str],
    notes_dir: str,
    partitioned: bool,
) -> dg.JobDefinition:
    """The workflow's job on ``executor`` (``dask`` or ``ray``) at ``address``."""
    if executor == "dask":
        from dagster_graphbook.integrations.dask import dask_executor

        executor_def = dask_executor.configured({"cluster": {"existing": {"address": address}}})
    else:
        from dagster_ray import ray_executor

        # the step runs as a Ray job (`dagster api execute_step`), which imports this module
        # (tests.e2e.distributed_jobs) from the repository root
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        executor_def = ray_executor.configured(
            {"ray": {"address": address, "env_vars": [f"PYTHONPATH={root}"]}}
        )
    partitions = DAILY if partitioned else None
    spec = GraphbookWorkflow(
        workflow, custom_nodes=list(custom_nodes), partitions_def=partitions, executor=executor_def
    )
    defs = build_definitions([spec], notes_dir=notes_dir)
    return defs.resolve_job_def(defs.jobs[0].name)  # type: ignore[union-attr]


def sharded_job(
    address: str,
    workflow: str,
    custom_nodes: Sequence[str],
    notes_dir: str,
    shards: int,
    partitioned: bool,
) -> dg.JobDefinition:
    """The workflow's job on Ray at ``address`` with ``ClassifyShapes`` in ``shards`` shards,
    each asking for one GPU (``gpus=``: ``num_gpus`` in its ``dagster-ray/config`` tag),
    partitioned by day when ``partitioned``."""
    from dagster_ray import ray_executor

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = GraphbookWorkflow(
        workflow,
        custom_nodes=list(custom_nodes),
        partitions_def=DAILY if partitioned else None,
        shards={"ClassifyShapes": shards},
        gpus={"ClassifyShapes": 1},
        executor=ray_executor.configured(
            {"ray": {"address": address, "env_vars": [f"PYTHONPATH={root}"]}}
        ),
    )
    defs = build_definitions([spec], notes_dir=notes_dir)
    return defs.resolve_job_def(defs.jobs[0].name)  # type: ignore[union-attr]
