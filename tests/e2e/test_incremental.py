"""Incremental runs of the nightly demo (docs/incremental.md): only new or changed notes go
through a step, and what the run's assets hold is what a full run gives.

Real runs of ``workflows/nightly_shapes.json`` with the CNN the ``project`` fixture trained,
real images, real files. ``ClassifyShapes`` runs in batches of 10 and days hold multiples of 10
images, so a run computing only the new images batches them as a full run does (a batch of other
images changes the CNN's last bits, docs/sharding.md).
"""

from __future__ import annotations

import csv
import os
import shutil
import time
from pathlib import Path
from typing import Any, Dict, Optional

import dagster as dg
import pandas as pd
import pytest

from tests.support.nightly import shapes_data
from tests.support.paths import REPO

WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"
DAY = "2026-03-01"
STEPS = ("ClassifyShapes", "ReviewSplit", "SaveResized")
# the project's CNN and its images: one worker runs these tests in turn
pytestmark = pytest.mark.xdist_group("incremental_demo")


class Day:
    """A day folder that grows: ``add(n)`` copies the next ``n`` of the generated images (and
    their labels) in, as late data lands."""

    def __init__(self, tmp_path: Path, total: int):
        self.all = shapes_data().make_day(tmp_path / "generated", DAY, total)
        self.folder = tmp_path / "incoming" / DAY
        self.folder.mkdir(parents=True)
        with open(self.all / "labels.csv", newline="") as f:
            self.labels = list(csv.DictReader(f))
        self.count = 0

    def add(self, n: int) -> None:
        for row in self.labels[self.count : self.count + n]:
            shutil.copy2(self.all / row["file"], self.folder / row["file"])
        self.count += n
        with open(self.folder / "labels.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["file", "label"])
            writer.writeheader()
            writer.writerows(self.labels[: self.count])


def _meta(run: Any) -> Dict[str, Dict[str, Any]]:
    """Each step's materialization metadata (its first pin's) of ``run``."""
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        records = instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
    meta: Dict[str, Dict[str, Any]] = {}
    for record in records:
        m = record.asset_materialization
        assert m is not None
        step = m.asset_key.path[1]
        meta.setdefault(step, {k: v.value for k, v in m.metadata.items()})
    return meta


def _tables(run: Any) -> Dict[str, pd.DataFrame]:
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        records = instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
    tables = {}
    for record in records:
        m = record.asset_materialization
        assert m is not None
        if "table_path" in m.metadata:
            tables[m.asset_key.to_user_string()] = pd.read_parquet(m.metadata["table_path"].value)
    return tables


def _computed(meta: Dict[str, Dict[str, Any]]) -> Dict[str, Optional[int]]:
    return {s: meta[s].get("notes_computed") for s in STEPS}


@pytest.fixture
def demo(project, tmp_path, run_wf):
    """``demo(day, **run_wf kwargs)``: the demo over ``day``'s folder, incremental, notes and
    outputs in the test's folders; ``params`` given are set over the demo's."""
    out, notes = tmp_path / "outputs", tmp_path / "notes"

    def run(
        day: Day, params: Optional[Dict[str, Any]] = None, nodes: Path = NODES, **kwargs: Any
    ) -> Any:
        kwargs.setdefault("runtime", {"incremental": True})
        kwargs.setdefault("notes_dir", str(notes))
        given = {
            "IncomingImages.folder": str(day.folder),
            "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
            "SaveResized.output_dir": str(out),
            "ClassifyShapes.batch_size": 10,
            **(params or {}),
        }
        done = run_wf(WORKFLOW, [nodes], given, **kwargs)
        assert done.success, done.failure
        return done

    run.out = out  # type: ignore[attr-defined]
    return run


def _written(out: Path) -> Dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*.png")}


def test_late_data_runs_only_the_new_images_and_gives_a_full_runs_notes(demo, tmp_path):
    day = Day(tmp_path, 50)
    day.add(40)
    first = demo(day)
    meta = _meta(first)
    assert meta["ClassifyShapes"]["images_classified"] == 40
    assert _computed(meta) == {
        "ClassifyShapes": 40,
        "ReviewSplit": 40,
        "SaveResized": len(first["SaveResized"]["out"]),
    }
    written = _written(demo.out)
    assert len(written) == len(first["SaveResized"]["out"]) > 0

    day.add(10)  # late data: 10 more images land in the day's folder
    time.sleep(0.01)
    second = demo(day)
    meta = _meta(second)
    # the model saw exactly the 10 new images; the 40 others came back from the store
    assert meta["ClassifyShapes"]["images_classified"] == 10
    assert meta["ClassifyShapes"]["notes_reused"] == 40
    assert meta["ClassifyShapes"]["reused_from"] == {first.run_id: 40}
    new_confident = len(second["SaveResized"]["out"]) - len(first["SaveResized"]["out"])
    assert _computed(meta) == {
        "ClassifyShapes": 10,
        "ReviewSplit": 10,
        "SaveResized": new_confident,
    }
    assert meta["SaveResized"]["files_written"] == new_confident
    now = _written(demo.out)
    assert {k: v for k, v in now.items() if k in written} == written  # none written again
    assert len(now) == len(second["SaveResized"]["out"])

    # a full run of the 50 images (not incremental, a store of its own) gives the same notes
    full = demo(day, runtime=None, notes_dir=str(tmp_path / "full_notes"))
    assert "notes_reused" not in _meta(full)["ClassifyShapes"]
    assert not (tmp_path / "full_notes" / "incremental").exists()  # off: no store at all
    assert second.notes == full.notes
    tables, full_tables = _tables(second), _tables(full)
    assert sorted(tables) == ["nightly_shapes/ReviewSplit/review", "nightly_shapes/SaveResized"]
    for key, table in full_tables.items():
        pd.testing.assert_frame_equal(tables[key], table)


def test_a_change_downstream_reruns_only_the_changed_step(demo, tmp_path):
    day = Day(tmp_path, 30)
    day.add(30)
    first = demo(day)
    second = demo(day, {"SaveResized.size": 32})  # a new size for the resized copies
    meta = _meta(second)
    saved = len(second["SaveResized"]["out"])
    assert _computed(meta) == {"ClassifyShapes": 0, "ReviewSplit": 0, "SaveResized": saved}
    assert meta["ClassifyShapes"]["notes_reused"] == 30
    assert meta["SaveResized"]["files_written"] == saved > 0
    assert second["ClassifyShapes"] == first["ClassifyShapes"]
    from PIL import Image

    with Image.open(second["SaveResized"]["out"][0]["output_path"]) as image:
        assert image.size == (32, 32)


def _retrain_in_place(checkpoint: Path) -> None:
    """The checkpoint "retrained": other weights at the same path, its mtime set back to the
    old one's (a copy that keeps times does so)."""
    import torch

    before = checkpoint.stat()
    ckpt = torch.load(checkpoint, weights_only=False)
    with torch.no_grad():
        for p in ckpt["model"].parameters():
            p.mul_(1.01)
    torch.save(ckpt, checkpoint)
    os.utime(checkpoint, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_each_change_upstream_recomputes_exactly_the_notes_it_affects(demo, project, tmp_path):
    day = Day(tmp_path, 30)
    day.add(30)
    checkpoint = tmp_path / "model" / "shapes_cnn.pt"
    checkpoint.parent.mkdir()
    shutil.copy2(project["root"] / "models" / "shapes_cnn.pt", checkpoint)
    nodes = tmp_path / "nodes"
    shutil.copytree(NODES, nodes, ignore=shutil.ignore_patterns("__pycache__"))

    def run(params: Optional[Dict[str, Any]] = None) -> Any:
        return demo(day, {"ShapesModel.checkpoint": str(checkpoint), **(params or {})}, nodes)

    first = run()
    assert _computed(_meta(first))["ClassifyShapes"] == 30
    assert _computed(_meta(run())) == {"ClassifyShapes": 0, "ReviewSplit": 0, "SaveResized": 0}

    # 1. the checkpoint retrained at the same path: the model's step sees every image again
    _retrain_in_place(checkpoint)
    meta = _meta(run())
    assert meta["ClassifyShapes"]["notes_computed"] == 30
    assert meta["ClassifyShapes"]["images_classified"] == 30

    # 2. a parameter changed for the run (the launchpad's): its step only, and downstream
    # only the notes whose input changed
    lower = run({"ReviewSplit.threshold": 0.5})
    meta = _meta(lower)
    assert meta["ClassifyShapes"]["notes_computed"] == 0
    assert meta["ReviewSplit"]["notes_computed"] == 30
    moved = len(lower["SaveResized"]["out"]) - len(run()["SaveResized"]["out"])
    assert meta["SaveResized"]["notes_computed"] == moved

    # 3. an image replaced under the same name: that note, in every step it reaches
    replaced = day.folder / "img_0007.png"
    shutil.copy(day.folder / "img_0003.png", replaced)
    meta = _meta(run())
    assert meta["ClassifyShapes"]["notes_computed"] == 1
    assert meta["ReviewSplit"]["notes_computed"] == 1
    assert meta["SaveResized"]["notes_computed"] <= 1

    # 4. the node file edited: every step it defines runs again
    code = nodes / "nightly_nodes.py"
    code.write_text(code.read_text() + "\n# a comment changes the file\n")
    meta = _meta(run())
    assert _computed(meta) == {
        "ClassifyShapes": 30,
        "ReviewSplit": 30,
        "SaveResized": meta["SaveResized"]["notes_computed"],
    }
    assert meta["SaveResized"]["notes_computed"] > 0 and meta["SaveResized"]["notes_reused"] == 0


def test_sharded_in_a_bucket_reuses_as_unsharded_on_disk(project, tmp_path, run_wf, bucket):
    """ClassifyShapes in 2 shards on the multiprocess executor, images, notes, store and outputs
    in a bucket (moto): late data and a replaced image are computed alone, and the notes are
    those of a full local unsharded run of the same images."""
    from tests.e2e.test_bucket_storage import _localized

    day = Day(tmp_path, 30)
    checkpoint = str(project["root"] / "models" / "shapes_cnn.pt")
    prefix = f"{bucket.name}/incoming/{DAY}"

    def upload(n: int) -> None:
        day.add(n)
        for path in sorted(day.folder.iterdir()):
            bucket.fs.put_file(str(path), f"{prefix}/{path.name}")

    def run(root: str, notes: str, **kwargs: Any) -> Any:
        done = run_wf(
            WORKFLOW,
            [NODES],
            {
                "IncomingImages.folder": f"{root}/incoming/{DAY}",
                "ShapesModel.checkpoint": checkpoint,
                "SaveResized.output_dir": f"{root}/outputs",
                "ClassifyShapes.batch_size": 10,
            },
            notes_dir=notes,
            **kwargs,
        )
        assert done.success, done.failure
        return done

    def sharded() -> Any:
        return run(
            bucket.url,
            f"{bucket.url}/notes",
            executor="multiprocess",
            shards={"ClassifyShapes": 2},
            runtime={"incremental": True},
        )

    upload(20)
    first = sharded()
    assert _meta(first)["ClassifyShapes"]["notes_computed"] == 20
    upload(10)  # late data
    second = sharded()
    meta = _meta(second)
    assert meta["ClassifyShapes"]["notes_computed"] == meta["ClassifyShapes"]["images_classified"]
    assert (meta["ClassifyShapes"]["notes_computed"], meta["ClassifyShapes"]["notes_reused"]) == (
        10,
        20,
    )
    assert meta["ClassifyShapes"]["details"]["shards"] == 2
    assert bucket.objects("notes/incremental/nightly_shapes/ClassifyShapes")  # the packs
    full = run(str(tmp_path), str(tmp_path / "full"))  # in process, unsharded, not incremental
    assert _localized(second.notes, bucket.url, str(tmp_path)) == full.notes

    # an image replaced in the bucket under the same name: that note only
    bucket.fs.put_file(str(day.folder / "img_0003.png"), f"{prefix}/img_0007.png")
    meta = _meta(sharded())
    assert meta["ClassifyShapes"]["notes_computed"] == 1
    assert meta["ReviewSplit"]["notes_computed"] == 1


def test_the_yaml_components_incremental_default_and_a_check_on_a_run_with_nothing_new(
    project, tmp_path, dagster_home
):
    """``runtime: {incremental: true}`` in defs.yaml is each step's launchpad default; a run of a
    day whose notes were all computed before reuses them, and the accuracy check on the model's
    step, which computed nothing, passes saying so."""
    from dagster_graphbook.runner.run_config import run_config_for
    from tests.support.defs_folder import load_defs_folder

    day = Day(tmp_path, 20)
    day.add(20)
    yaml = f"""
        type: dagster_graphbook.GraphbookWorkflowComponent
        attributes:
          workflow: {WORKFLOW}
          custom_nodes: [{NODES}]
          notes_dir: {tmp_path / "notes"}
          runtime: {{incremental: true}}
          checks:
            - {{step: ClassifyShapes, metric: accuracy, min: 0.9, severity: warn}}
    """
    (tmp_path / "project").mkdir()
    defs = load_defs_folder(tmp_path / "project", "incremental_yaml", {"nightly": yaml})
    job = defs.resolve_job_def("nightly_shapes")
    op = job.graph.node_named("nightly_shapes__ClassifyShapes").definition
    runtime = op.config_schema.config_type.fields["runtime"].config_type.fields
    assert runtime["incremental"].default_value is True
    from dagster_graphbook import GraphbookWorkflow
    from dagster_graphbook.defs.definitions import build_workflow

    workflow = build_workflow(GraphbookWorkflow(WORKFLOW, custom_nodes=[NODES])).workflow
    params = {
        "IncomingImages.folder": str(day.folder),
        "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
        "SaveResized.output_dir": str(tmp_path / "outputs"),
    }
    evaluations = []
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for _ in range(2):
            wf = defs.resolve_job_def("nightly_shapes")
            result = wf.execute_in_process(
                run_config=run_config_for(workflow, params), instance=instance
            )
            assert result.success
            (evaluation,) = [
                e.event_specific_data
                for e in result.all_events
                if e.event_type_value == "ASSET_CHECK_EVALUATION"
            ]
            evaluations.append(evaluation)
        # the launchpad turning it off on a step the component made incremental: a refresh
        off = run_config_for(workflow, {**params, "ClassifyShapes.runtime.incremental": False})
        result = defs.resolve_job_def("nightly_shapes").execute_in_process(
            run_config=off, instance=instance
        )
        assert result.success
        (refreshed,) = [
            e.event_specific_data.materialization.metadata
            for e in result.all_events
            if e.event_type_value == "ASSET_MATERIALIZATION"
            and e.event_specific_data.materialization.asset_key.path[-1] == "ClassifyShapes"
        ]
    first, second = evaluations
    assert first.passed and first.metadata["value"].value >= 0.9
    assert second.passed and "no note computed in this run (20 reused" in second.description
    assert refreshed["details"].value["incremental"] == "refresh"
    assert (refreshed["notes_computed"].value, refreshed["notes_reused"].value) == (20, 0)


def test_a_streamed_workflow_reuses_its_steps_notes_and_full_recomputes_all(demo, tmp_path):
    """All steps streamed as one op: each streamed step keys its chunks' notes; ``full=True``
    (the CLI's ``--full``) recomputes every note and refreshes the store."""
    day = Day(tmp_path, 20)
    day.add(20)
    first = demo(day, streaming=True)
    again = demo(day, streaming=True)
    meta = _meta(again)
    assert meta["SaveResized"]["notes_computed"] == 0
    assert meta["SaveResized"]["notes_reused"] == len(first["SaveResized"]["out"]) > 0
    assert again.notes == first.notes
    saved = len(first["SaveResized"]["out"])
    refreshed = demo(day, streaming=True, full=True)
    full = _meta(refreshed)
    assert (full["SaveResized"]["notes_computed"], full["SaveResized"]["notes_reused"]) == (
        saved,
        0,
    )
    assert full["SaveResized"]["details"]["incremental"] == "refresh"
    assert "reused_from" not in full["SaveResized"]
    after = _meta(demo(day, streaming=True))
    assert after["SaveResized"]["notes_computed"] == 0
    assert after["SaveResized"]["reused_from"] == {refreshed.run_id: saved}  # the refreshed ones


def test_a_growing_folder_with_the_files_sensor_sends_only_new_files_through(
    project, tmp_path, dagster_home
):
    """An unpartitioned workflow over a folder that grows, with ``FolderSensor(watch="files")``:
    a tick with no change requests nothing; late files request one run, which computes them
    alone."""
    from dagster_graphbook import FolderSensor, GraphbookWorkflow, build_definitions
    from dagster_graphbook.runner.run_config import run_config_for

    day = Day(tmp_path, 30)
    day.add(20)
    spec = GraphbookWorkflow(
        WORKFLOW,
        custom_nodes=[NODES],
        runtime={"incremental": True},
        sensor=FolderSensor(day.folder, watch="files"),
    )
    defs = build_definitions([spec], notes_dir=str(tmp_path / "notes"))
    sensor = defs.resolve_sensor_def("nightly_shapes_new_files")
    job = defs.resolve_job_def("nightly_shapes")
    params = {
        "IncomingImages.folder": str(day.folder),
        "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
        "SaveResized.output_dir": str(tmp_path / "outputs"),
        "ClassifyShapes.batch_size": 10,
    }
    from dagster_graphbook.defs.definitions import build_workflow

    config = run_config_for(build_workflow(GraphbookWorkflow(WORKFLOW, [NODES])).workflow, params)
    cursor = None
    classified = []
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for late in (0, 0, 10):
            if late:  # (adding rewrites labels.csv: a change)
                day.add(late)
            tick = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=cursor))
            cursor = tick.cursor
            if not tick.run_requests:
                assert tick.skip_message and "no file changed" in tick.skip_message
                classified.append(None)
                continue
            (request,) = tick.run_requests
            result = job.execute_in_process(run_config=config, instance=instance, tags=request.tags)
            assert result.success
            (m,) = [
                e.event_specific_data.materialization
                for e in result.all_events
                if e.event_type_value == "ASSET_MATERIALIZATION"
                and e.event_specific_data.materialization.asset_key.path[-1] == "ClassifyShapes"
            ]
            classified.append(m.metadata["notes_computed"].value)
    assert classified == [20, None, 10]


def test_a_checkpoint_named_relative_to_the_project_is_keyed_from_anywhere(
    demo, project, tmp_path, monkeypatch
):
    """The demo's model resolves ``models/shapes_cnn.pt`` from its project's root when the
    current folder has none: retrained there, it is a change for a run started elsewhere."""
    root = tmp_path / "project"
    shutil.copytree(NODES, root / "custom_nodes" / "nightly", ignore=shutil.ignore_patterns("__*"))
    (root / "models").mkdir()
    shutil.copy2(project["root"] / "models" / "shapes_cnn.pt", root / "models" / "shapes_cnn.pt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    day = Day(tmp_path, 20)
    day.add(20)
    relative = {"ShapesModel.checkpoint": "models/shapes_cnn.pt"}
    nodes = root / "custom_nodes" / "nightly"
    assert _meta(demo(day, relative, nodes))["ClassifyShapes"]["notes_computed"] == 20
    assert _meta(demo(day, relative, nodes))["ClassifyShapes"]["notes_computed"] == 0
    _retrain_in_place(root / "models" / "shapes_cnn.pt")
    assert _meta(demo(day, relative, nodes))["ClassifyShapes"]["notes_computed"] == 20
