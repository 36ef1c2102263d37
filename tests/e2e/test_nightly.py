"""The nightly shapes demo end to end: generated days, a CNN trained by the repository's script,
one day materialized through Dagster (accuracy, tables, files, lineage) and a backfill over a date
range.

The fixture lays out a project like the repository (``data/incoming/<day>/``,
``models/shapes_cnn.pt``) in a temporary folder, so the workflow runs with the parameters of
``workflows/nightly_shapes.json``.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.support.nightly import DAYS, PER_DAY, shapes_data
from tests.support.paths import REPO

WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"
# every test here writes into the one project folder (outputs/<day>): one worker runs them in turn
pytestmark = pytest.mark.xdist_group("nightly_project_root")

KEY = lambda *path: dg.AssetKey(["nightly_shapes", *path])  # noqa: E731


def _defs(notes: Path) -> dg.Definitions:
    from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions

    return build_definitions(
        [
            GraphbookWorkflow(
                WORKFLOW,
                custom_nodes=[NODES],
                partitions_def=daily_partitions("2026-01-01"),
                external_deps={"IncomingImages": [["nightly_shapes", "incoming"]]},
                executor="in_process",
            )
        ],
        notes_dir=str(notes),
    )


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.iterdir()):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_generator_is_deterministic_per_day_and_writes_days_whole(tmp_path):
    data = shapes_data()
    a = data.make_day(tmp_path / "a", "2026-05-01", 12)
    b = data.make_day(tmp_path / "b", "2026-05-01", 12)
    other = data.make_day(tmp_path / "a", "2026-05-02", 12)
    assert _digest(a) == _digest(b) != _digest(other)
    labels = (a / "labels.csv").read_text().splitlines()
    assert labels[0] == "file,label" and len(labels) == 13
    assert {line.split(",")[1] for line in labels[1:]} <= set(data.CLASSES)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "2026-05-01",
        "2026-05-02",
    ]  # no temporary folder left
    assert all(
        re.fullmatch(r"img_\d{4}\.png", p.name) for p in a.glob("*.png")
    )  # names do not give the label away
    with pytest.raises(ValueError):
        data.make_day(tmp_path, "2026-13-01", 1)


def test_one_day_through_dagster(project, tmp_path, monkeypatch):
    """One partition: accuracy and items/s in the metadata, tables, resized copies by label,
    lineage."""
    import pandas as pd

    monkeypatch.chdir(
        project["root"]
    )  # the workflow's relative paths (data/, models/, outputs/) resolve here
    day = DAYS[1]
    defs = _defs(tmp_path / "notes")
    graph = defs.resolve_asset_graph()
    assert graph.get(KEY("IncomingImages")).parent_keys == {KEY("incoming")}
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("nightly_shapes").execute_in_process(
            instance=instance, partition_key=day
        )
        assert result.success
        meta = {}
        for key in (
            KEY("ClassifyShapes"),
            KEY("ReviewSplit", "review"),
            KEY("ReviewSplit", "confident"),
            KEY("SaveResized"),
        ):
            event = instance.get_latest_materialization_event(key)
            assert event.asset_materialization.partition == day
            meta[key] = event.asset_materialization.metadata

    classify = meta[KEY("ClassifyShapes")]
    assert classify["accuracy"].value >= 0.9, classify["accuracy"]
    assert classify["images_labelled"].value == PER_DAY
    assert (
        isinstance(classify["items_per_s"], dg.FloatMetadataValue)
        and classify["items_per_s"].value > 0
    )

    review, confident, saved = (
        meta[KEY("ReviewSplit", "review")],
        meta[KEY("ReviewSplit", "confident")],
        meta[KEY("SaveResized")],
    )
    assert review["dagster/row_count"].value + confident["dagster/row_count"].value == PER_DAY
    table = pd.read_parquet(saved["table_path"].value)
    assert len(table) == saved["dagster/row_count"].value == confident["dagster/row_count"].value
    assert {"image", "label", "confidence", "true_label", "correct", "output_path"} <= set(
        table.columns
    )
    assert (table["confidence"] >= 0.9).all()
    assert {c.name for c in saved["dagster/column_schema"].value.columns} == set(table.columns)
    # its notes hold images: thumbnails are the preview, the first rows (as text) sit beside them
    assert isinstance(saved["preview"], dg.MarkdownMetadataValue)
    assert saved["preview"].value.count("data:image/jpeg;base64,") == min(12, len(table))
    preview = saved["table_preview"].value
    assert [c.name for c in preview.schema.columns] == list(table.columns)
    assert [r.data for r in preview.records] == table.head(5).astype(str).to_dict("records")

    outputs = project["root"] / "outputs" / day
    for row in table.itertuples():
        path = Path(row.output_path)
        assert path.parent == outputs / row.label and path.is_file()
    written = sorted(outputs.rglob("*.png"))
    assert saved["files_written"].value == len(written) == len(table)
    assert saved["files_bytes"].value == sum(p.stat().st_size for p in written)
    from PIL import Image

    with Image.open(written[0]) as image:
        assert image.size == (48, 48)
    assert not list(outputs.rglob("*.tmp*"))


def test_edited_parameters_take_effect(project, tmp_path, monkeypatch):
    """Launchpad config: threshold 0 leaves nothing to review; the copies go to another folder
    ({partition_key} filled in)."""
    monkeypatch.chdir(project["root"])
    config = {
        "ops": {
            "nightly_shapes__ReviewSplit": {"config": {"threshold": 0.0}},
            "nightly_shapes__SaveResized": {
                "config": {"output_dir": str(tmp_path / "out" / "{partition_key}"), "size": 20}
            },
        }
    }
    with dg.instance_for_test() as instance:
        result = (
            _defs(tmp_path / "notes")
            .resolve_job_def("nightly_shapes")
            .execute_in_process(instance=instance, partition_key=DAYS[0], run_config=config)
        )
        assert result.success
        review = instance.get_latest_materialization_event(
            KEY("ReviewSplit", "review")
        ).asset_materialization.metadata
        assert review["dagster/row_count"].value == 0
    copies = sorted((tmp_path / "out" / DAYS[0]).rglob("*.png"))
    assert len(copies) == PER_DAY
    from PIL import Image

    with Image.open(copies[0]) as image:
        assert image.size == (20, 20)


def test_missing_day_fails_naming_the_step_and_folder(project, tmp_path, monkeypatch):
    monkeypatch.chdir(project["root"])
    with dg.instance_for_test() as instance:
        result = (
            _defs(tmp_path / "notes")
            .resolve_job_def("nightly_shapes")
            .execute_in_process(instance=instance, partition_key="2026-02-01", raise_on_error=False)
        )
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure)
        text = str(failure.step_failure_data.error.to_string())
    assert (
        "IncomingImages" in text
        and "nightly_shapes" in text
        and "no incoming folder" in text
        and "2026-02-01" in text
    )


def test_backfill_over_a_date_range(project, tmp_path):
    """`dagster job backfill --from --to` (Dagster's backfill, one run per day) over two days."""
    days = list(DAYS[:2])
    root = project["root"]
    (tmp_path / "defs.py").write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(WORKFLOW)!r}, "
        f"custom_nodes=[{str(NODES)!r}], "
        "partitions_def=daily_partitions('2026-01-01'), executor='in_process')], "
        f"notes_dir={str(tmp_path / 'notes')!r})\n"
    )
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n  - python_file: {relative_path: defs.py, location_name: backfill_test}\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    # No daemon here: runs start at once instead of waiting in the queue.
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\nrun_coordinator:\n  module: "
        "dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
    )
    dagster = Path(sys.executable).parent / "dagster"
    out = subprocess.run(
        [
            str(dagster),
            "job",
            "backfill",
            "-w",
            str(tmp_path / "workspace.yaml"),
            "-j",
            "nightly_shapes",
            "--from",
            days[0],
            "--to",
            days[-1],
            "--noprompt",
        ],
        cwd=root,
        env={**os.environ, "DAGSTER_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        backfills = instance.get_backfills()
        assert len(backfills) == 1 and backfills[0].partition_names == days
        runs = instance.get_runs()
        assert sorted(r.tags["dagster/partition"] for r in runs) == days
        assert all(
            r.status == dg.DagsterRunStatus.SUCCESS
            and r.tags["dagster/backfill"] == backfills[0].backfill_id
            for r in runs
        ), [(r.run_id, r.status) for r in runs]
        for day in days:
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=KEY("ClassifyShapes"), asset_partitions=[day]),
                limit=1,
            ).records
            assert records and records[0].asset_materialization.metadata["accuracy"].value >= 0.9
            saved = (
                instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=KEY("SaveResized"), asset_partitions=[day]),
                    limit=1,
                )
                .records[0]
                .asset_materialization.metadata
            )
            assert saved["files_written"].value == saved["dagster/row_count"].value > 0
            assert all(
                Path(p).parent.parent == root / "outputs" / day for p in saved["files_sample"].value
            )


def test_materialize_command_runs_a_day_of_the_code_location(project, tmp_path):
    """What scripts/demo.sh runs: `dagster-graphbook materialize JOB --partition DAY` on a code
    location module."""
    root = project["root"]
    (root / "nightly_cli_defs.py").write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(WORKFLOW)!r}, "
        f"custom_nodes=[{str(NODES)!r}], "
        "partitions_def=daily_partitions('2026-01-01'))], "
        f"notes_dir={str(tmp_path / 'notes')!r})\n"
    )
    cli = Path(sys.executable).parent / "dagster-graphbook"

    def materialize(*extra: str) -> subprocess.CompletedProcess:
        """The day, with ``extra`` arguments (``--set ...``), as demo.sh runs it."""
        argv = ["materialize", "nightly_shapes", "--module", "nightly_cli_defs", "--partition"]
        return subprocess.run(
            [str(cli), *argv, DAYS[2], "--dagster-home", str(tmp_path / "home"), *extra],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
        )

    out = materialize(
        "--set", f"SaveResized.output_dir={tmp_path}/copies/{{partition_key}}", "--no-progress"
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"run \S+: SUCCESS", out.stdout)
    accuracy = float(
        re.search(r"nightly_shapes/ClassifyShapes: accuracy ([0-9.]+)", out.stdout).group(1)
    )
    assert accuracy >= 0.9
    saved = int(re.search(r"SaveResized\s+out: (\d+) notes", out.stdout).group(1))
    assert len(list((tmp_path / "copies" / DAYS[2]).rglob("*.png"))) == saved > 0
    bad = materialize("--set", "NoSuchStep.x=1")
    assert bad.returncode != 0 and "NoSuchStep.x" in bad.stderr and "ClassifyShapes" in bad.stderr
    # a resource's parameter, as `run --set` takes it: it reaches the resource (refused before)
    other = materialize("--set", "ShapesModel.checkpoint=models/no_such_model.pt", "--no-progress")
    said = other.stdout + other.stderr
    assert other.returncode == 1, said
    assert "no model checkpoint at" in said and "no_such_model.pt" in said, said
