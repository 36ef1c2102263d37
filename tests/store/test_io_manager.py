"""The notes IO manager (``store/io_manager.py``) on real runs."""

from __future__ import annotations

import os

import dagster as dg

from dagster_graphbook.store import codec
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow


def test_a_relative_notes_dir_is_recorded_absolute_and_read_from_another_cwd(
    tmp_path, dagster_home, run_wf, monkeypatch
):
    """``notes_dir="rel_notes"`` recorded ``dagster/uri='rel_notes/...'``: from any other working
    directory (a ``dagster dev`` started elsewhere, a notebook) the notes were not found. The
    location is made absolute against the working directory at definition load."""
    nodes = copy_nodes(tmp_path / "nodes", "io_nodes.py", "stored_notes")
    wf = write_workflow(
        tmp_path,
        "rel",
        [step_node("0", "Emit", source=True), step_node("1", "Double")],
        [edge("0", "out", "1")],
    )
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(project)
    run = run_wf(wf, [nodes], notes_dir="rel_notes")
    assert run.success, run.failure

    monkeypatch.chdir(elsewhere)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        key = dg.AssetKey(["rel", "Double"])
        record = instance.get_latest_materialization_event(key)
        assert record is not None and record.asset_materialization is not None
        uri = str(record.asset_materialization.metadata["dagster/uri"].value)
    assert os.path.isabs(uri) and uri.startswith(str(project / "rel_notes")), uri
    with open(uri, "rb") as f:
        assert [n["twice"] for n in codec.load(f)] == [0, 2, 4]


def test_a_notes_dir_url_is_recorded_as_given():
    """Only local folders are made absolute: a URL names its own file system."""
    from dagster_graphbook.store.io_manager import NOTES_DIR_META, notes_metadata

    for url in ("s3://bucket/notes", "memory://notes", "file:///srv/notes"):
        assert notes_metadata(url)[NOTES_DIR_META] == url
