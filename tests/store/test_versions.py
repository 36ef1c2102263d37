"""Stored versions (``dagster_graphbook/store/versions.py``): a sharded step's intermediates are
pruned as its notes are, per partition, never those a resume still reads."""

from __future__ import annotations

import os
import time
import uuid

import dagster as dg
import pytest
from upath import UPath

from dagster_graphbook.store.manifests import manifest_path, write_manifest
from dagster_graphbook.store.versions import (
    notes_path,
    prune,
    prune_step_outputs,
    step_output_path,
    version_folder,
    write_atomic,
)

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


def test_retention_in_a_bucket_keeps_what_local_disk_keeps(tmp_path, bucket):
    """Five runs of one day, notes_keep=3, on local disk and in a bucket (moto's S3 server):
    the same 3 versions of the asset (with their files manifests) and the same 3 runs of shard
    intermediates are kept. Each run's version is written as the IO manager writes it
    (``write_atomic``); its shards' results by another client (as by the shard's own process),
    after this process listed the folder. Before, the bucket kept 4 versions and 4 runs of
    intermediates, and the wrong ones: s3fs names a time ``LastModified``, not ``mtime``, so
    every version was as old as any other (and a folder, a prefix, has no time at all); a
    cached listing missed the newest."""
    key, day = dg.AssetKey(["wf", "S"]), "2026-01-01"
    bases = {"local": UPath(tmp_path / "notes"), "bucket": UPath(f"{bucket.url}/notes")}
    kept_versions, kept_outputs = {}, {}
    with dg.instance_for_test() as instance:
        runs = []
        for _ in range(5):
            run_id = _run(instance, dg.DagsterRunStatus.SUCCESS)
            runs.append(run_id)
            for base in bases.values():
                folder = version_folder(base, key, day)
                manifest = manifest_path(str(base), key, day, run_id)  # written before the notes
                write_manifest([("/out/a.png", 1)], manifest, "wf__S", run_id)
                write_atomic(notes_path(folder, run_id), lambda f: f.write(b"notes"))
                prune(folder, 3, instance, protect=[run_id])
                for shard in (0, 1):
                    step = f"wf__S.wf__S__shard[shard_{shard}]"
                    out = step_output_path(base, run_id, step, ["result"], day)
                    if base.protocol == "s3":  # another process's client: this one's cache is old
                        bucket.fs.pipe_file(out.path, b"shard result")
                    else:
                        out.parent.mkdir(parents=True, exist_ok=True)
                        out.write_bytes(b"shard result")
                    prune_step_outputs(base, step, day, 3, instance, run_id)
            time.sleep(1.1)  # LastModified counts whole seconds
        for name, base in bases.items():
            folder = version_folder(base, key, day)
            kept_versions[name] = sorted(p.name for p in _fresh(folder).iterdir())
            step_outputs = _fresh(base / ".step_outputs" / "wf__S" / day)
            kept_outputs[name] = sorted(p.name for p in step_outputs.iterdir())
    kept = sorted(f"{r}{suffix}" for r in runs[2:] for suffix in (".pkl", ".files.json"))
    assert kept_versions["bucket"] == kept_versions["local"] == kept  # manifests go with notes
    assert kept_outputs["bucket"] == kept_outputs["local"] == sorted(runs[2:])
    shard_results = [k for k in bucket.objects("notes/.step_outputs") if k.endswith(".pkl")]
    assert len(shard_results) == 3 * 2


def _fresh(folder: UPath) -> UPath:
    if folder.protocol == "s3":
        folder.fs.invalidate_cache()
    return folder


def test_a_version_in_a_bucket_appears_whole_or_not_at_all(bucket):
    """A writer that fails part way leaves no object under the final name, nor a temporary
    object beside it, and an earlier version there stays as it was (an fsspec file written in
    place uploads what it holds when closed, failure or not)."""
    folder = UPath(f"{bucket.url}/notes/wf/S")
    done, failed = notes_path(folder, "run-a"), notes_path(folder, "run-b")
    write_atomic(done, lambda f: f.write(b"complete notes"))

    def half(f):
        f.write(b"half of the notes")
        raise RuntimeError("the writer died part way")

    for target in (failed, done):
        with pytest.raises(RuntimeError, match="part way"):
            write_atomic(target, half)
    assert bucket.objects("notes") == {"notes/wf/S/run-a.pkl": len(b"complete notes")}
    assert bucket.fs.cat_file(done.path) == b"complete notes"
