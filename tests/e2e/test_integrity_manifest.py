"""Stale outputs: each materialization names exactly the files it wrote."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from upath import UPath

from dagster_graphbook.store.manifests import read_manifest
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow


def test_the_latest_materialization_lists_exactly_its_own_files(tmp_path, run_wf, dagster_home):
    import dagster as dg

    nodes = copy_nodes(tmp_path / "nodes", "save_nodes.py", "manifest_dumps")
    out = tmp_path / "outputs"
    wf = write_workflow(
        tmp_path,
        "saver",
        [
            step_node("0", "Names", {"count": 5}, source=True),
            step_node("1", "Save", {"out_dir": str(out)}),
        ],
        [edge("0", "out", "1")],
    )
    first = run_wf(wf, [nodes], notes_dir=str(tmp_path / "notes"))
    second = run_wf(wf, [nodes], {"Names.count": 2}, notes_dir=str(tmp_path / "notes"))
    assert first.success and second.success
    on_disk = sorted(p.name for p in out.glob("*.txt"))
    assert on_disk == [f"img_{i}.txt" for i in range(5)]  # the first run's 3 extra files stay
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["saver", "Save"]))
    assert event.run_id == second.run_id
    manifest = event.asset_materialization.metadata["files_manifest"].value
    files = read_manifest(manifest)
    assert sorted(os.path.basename(p) for p in files) == ["img_0.txt", "img_1.txt"]
    assert all(os.path.isfile(p) for p in files)


@pytest.mark.parametrize("store", ["local", "bucket"])
def test_the_files_manifest_lies_beside_the_notes_and_is_pruned_with_them(
    tmp_path, run_wf, dagster_home, request, store
):
    """Each run's manifest is stored beside the step's notes version (in the bucket when
    notes_dir is one: before, it was written under the instance's storage on whichever node ran
    the step), ``files_manifest`` names it, it lists what dump_fn wrote, and the notes_keep
    retention (3) deletes it with its version."""
    import dagster as dg

    nodes = copy_nodes(tmp_path / "nodes", "save_nodes.py", "manifest_dumps")
    out = tmp_path / "outputs"
    if store == "bucket":
        notes_dir = f"{request.getfixturevalue('bucket').url}/notes"
    else:
        notes_dir = str(tmp_path / "notes")
    wf = write_workflow(
        tmp_path,
        "saver",
        [
            step_node("0", "Names", {"count": 1}, source=True),
            step_node("1", "Save", {"out_dir": str(out)}),
        ],
        [edge("0", "out", "1")],
    )
    runs = [run_wf(wf, [nodes], {"Names.count": n}, notes_dir=notes_dir) for n in (1, 2, 3, 4)]
    assert all(r.success for r in runs), [r.failure for r in runs]
    metas = []
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for run in runs:
            records = instance.get_records_for_run(
                run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            ).records
            (save,) = [
                r.asset_materialization
                for r in records
                if r.asset_materialization.asset_key == dg.AssetKey(["saver", "Save"])
            ]
            metas.append({k: v.value for k, v in save.metadata.items()})
    manifests = [m["files_manifest"] for m in metas]
    for run, meta, manifest in zip(runs, metas, manifests):
        notes = meta["dagster/uri"]
        assert notes.startswith(f"{notes_dir}/saver/Save/"), notes
        assert manifest == f"{notes.removesuffix('.pkl')}.files.json", (manifest, notes)
        assert manifest.endswith(f"/{run.run_id}.files.json")
    UPath(notes_dir).fs.invalidate_cache()
    kept = [UPath(m).exists() for m in manifests]  # a bucket orders by whole seconds: any 3
    assert kept == [UPath(m["dagster/uri"]).exists() for m in metas] and sum(kept) == 3, kept
    for count, manifest, there in zip((1, 2, 3, 4), manifests, kept):
        if there:
            files = sorted(read_manifest(manifest))
            assert files == [str(out / f"img_{i}.txt") for i in range(count)]
    assert not list(Path(dagster_home).rglob("*.json"))  # nothing in the instance's storage


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_files_written_through_atomic_path_are_recorded_when_dump_fn_returns_none(
    tmp_path, run_wf, dagster_home, worker_type
):
    """Graphbook's dump_fns return None: files written through the documented
    helper are recorded all the same; a dump_fn that writes otherwise gets a note saying why
    its step has no files_written."""
    import dagster as dg

    nodes = copy_nodes(tmp_path / "nodes", "gb_dumps.py", "manifest_graphbook_dumps")
    out = tmp_path / "outputs"
    out.mkdir()
    wf = write_workflow(
        tmp_path,
        "gbdumps",
        [
            step_node("0", "Names", {"count": 5}, source=True),
            step_node("1", "SaveViaHelper", {"out_dir": str(out)}),
            step_node("2", "SavePlain", {"out_dir": str(out)}),
        ],
        [edge("0", "out", "1"), edge("0", "out", "2")],
    )
    params = {f"{s}.runtime.worker_type": worker_type for s in ("SaveViaHelper", "SavePlain")}
    run = run_wf(wf, [nodes], params, notes_dir=str(tmp_path / "notes"))
    assert run.success, run.failure
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        helper, plain = (
            {
                k: v.value
                for k, v in instance.get_latest_materialization_event(
                    dg.AssetKey(["gbdumps", step])
                ).asset_materialization.metadata.items()
            }
            for step in ("SaveViaHelper", "SavePlain")
        )
    expected = sorted(str(out / f"img_{i}.txt") for i in range(5))
    assert helper["files_written"] == 5 and helper["files_bytes"] == sum(
        os.path.getsize(p) for p in expected
    )
    assert sorted(read_manifest(helper["files_manifest"])) == expected
    assert sorted(helper["files_sample"]) == expected
    assert "files_note" not in helper
    assert len(list(out.glob("*.plain"))) == 5  # written, but not through the helper
    assert "files_written" not in plain and "files_manifest" not in plain
    assert plain["files_note"].startswith("dump_fn ran 5 times and no file was recorded")
    assert "atomic_path()" in plain["files_note"]
