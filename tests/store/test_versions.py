"""Stored versions (``dagster_graphbook/store/versions.py``): a sharded step's intermediates are
pruned as its notes are, per partition, never those a resume still reads."""

from __future__ import annotations

import os
import time
import uuid

import dagster as dg
from upath import UPath

from dagster_graphbook.store.versions import prune_step_outputs, step_output_path

SHARD = "wf__S.wf__S__shard[shard_0]"


def _run(instance, status, parent=None):
    run_id = str(uuid.uuid4())
    instance.add_run(
        dg.DagsterRun(
            job_name="wf",
            run_id=run_id,
            status=status,
            parent_run_id=parent,
            root_run_id=parent,
        )
    )
    return run_id


def _write(base, run_id, partition, age_s):
    path = step_output_path(base, run_id, SHARD, ["result"], partition)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"shard result")
    stamp = time.time() - age_s
    for folder in (path.parent.parent, path.parent, path):  # the run folder's age is what counts
        os.utime(folder.path, (stamp, stamp))
    return path


def test_pruning_keeps_the_runs_lineage_and_other_partitions(tmp_path):
    """notes_keep=1: a from-failure run writing its first shard keeps the failed parent's
    outputs (its commit reads them: before, they were deleted and every resume failed), deletes
    an older finished run's, and leaves another partition's alone."""
    base = UPath(tmp_path / "notes")
    with dg.instance_for_test() as instance:
        old = _run(instance, dg.DagsterRunStatus.SUCCESS)
        parent = _run(instance, dg.DagsterRunStatus.FAILURE)
        child = _run(instance, dg.DagsterRunStatus.STARTED, parent=parent)
        other_day = _run(instance, dg.DagsterRunStatus.SUCCESS)
        paths = {
            old: _write(base, old, "2026-01-01", 300),
            parent: _write(base, parent, "2026-01-01", 200),
            child: _write(base, child, "2026-01-01", 0),
            other_day: _write(base, other_day, "2026-01-02", 400),
        }
        deleted = prune_step_outputs(base, SHARD, "2026-01-01", 1, instance, child)
        assert deleted == [old]
        assert not paths[old].exists()
        assert all(paths[r].exists() for r in (parent, child, other_day))
        # a later run of the partition that re-executes nothing: the parent's go, the child's
        # stay while it is in progress
        later = _run(instance, dg.DagsterRunStatus.STARTED)
        _write(base, later, "2026-01-01", 0)
        deleted = prune_step_outputs(base, SHARD, "2026-01-01", 1, instance, later)
        assert deleted == [parent]
        assert paths[child].exists() and paths[other_day].exists()
