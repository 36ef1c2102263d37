"""The nightly demo with ``ClassifyShapes`` sharded 4 ways on the multiprocess executor gives what
the unsharded job gives: the notes of every pin, the Parquet rows, the files written
(names and bytes) and ClassifyShapes's figures, accuracy recomputed from the shards' counts.

Real processes (a process per step and per shard), real images, the CNN trained by the
``project`` fixture. 256 images make 4 shards of 64, the step's batch size, so every shard's
batches are the unsharded run's batches: the CNN's outputs differ in the last bits (up to
1.5e-7 measured) when a batch holds other images, which a 4-decimal ``confidence`` shows in rare
notes (docs/sharding.md).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, Set, Tuple

import dagster as dg
import pandas as pd

from tests.support.nightly import shapes_data
from tests.support.paths import REPO

WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"
IMAGES = 256
DAY = "2026-04-01"
# per-run timings and settings: not expected to match
TIMINGS = {"seconds", "items_per_s", "loader_wait_s", "on_item_batch_s", "details", "dagster/uri"}


def _files(folder: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.png"))}


def _recorded(home: str, run_id: str) -> Tuple[Dict[str, Dict[str, Any]], Set[str]]:
    """The run's materializations (asset -> metadata values) and its step keys."""
    with dg.DagsterInstance.from_config(home) as instance:
        records = instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
        steps = {e.step_key for e in instance.all_logs(run_id) if e.step_key}
    meta = {}
    for record in records:
        m = record.asset_materialization
        assert m is not None
        meta[m.asset_key.to_user_string()] = {k: v.value for k, v in m.metadata.items()}
    return meta, steps


def test_classify_shapes_in_4_shards_gives_the_unsharded_results(project, tmp_path, run_wf):
    folder = shapes_data().make_day(tmp_path / "incoming", DAY, IMAGES)
    out = tmp_path / "outputs"
    params = {
        "IncomingImages.folder": str(folder),
        "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
        "SaveResized.output_dir": str(out),
    }
    runs, files, meta, steps = {}, {}, {}, {}
    for shards in (1, 4):
        run = run_wf(
            WORKFLOW,
            [NODES],
            params,
            executor="multiprocess",  # step processes forked from the preloaded forkserver
            shards={"ClassifyShapes": shards} if shards > 1 else None,
            notes_dir=str(tmp_path / "notes"),
        )
        assert run.success, run.failure
        runs[shards], files[shards] = run, _files(out)
        assert run.dagster_home is not None
        meta[shards], steps[shards] = _recorded(run.dagster_home, run.run_id)
        shutil.rmtree(out)  # the sharded run writes every file again

    whole, sharded = runs[1], runs[4]
    assert sorted(k for k in steps[4] if "__shard[" in k) == [
        f"nightly_shapes__ClassifyShapes.nightly_shapes__ClassifyShapes__shard[shard_{i}]"
        for i in range(4)
    ]
    assert not any("__shard[" in k for k in steps[1])
    assert sharded.counts() == whole.counts()
    assert whole.counts()["ClassifyShapes"]["out"] == IMAGES
    assert sharded.notes == whole.notes  # every step's pins: same notes, same order

    assert files[4] == files[1] and len(files[1]) == len(whole["SaveResized"]["out"]) > 0

    tables = [key for key, m in meta[1].items() if "table_path" in m]  # the sink tables
    assert sorted(tables) == ["nightly_shapes/ReviewSplit/review", "nightly_shapes/SaveResized"]
    for key in tables:
        pd.testing.assert_frame_equal(
            pd.read_parquet(meta[4][key]["table_path"]), pd.read_parquet(meta[1][key]["table_path"])
        )

    key = "nightly_shapes/ClassifyShapes"
    figures = {k: v for k, v in meta[1][key].items() if k not in TIMINGS}
    assert {k: meta[4][key].get(k) for k in figures} == figures  # no figures_note: none left out
    assert set(meta[4][key]) - TIMINGS == set(figures)
    assert figures["images_classified"] == figures["images_labelled"] == IMAGES
    assert figures["accuracy"] == round(figures["images_correct"] / IMAGES, 4) >= 0.9
    assert meta[4][key]["details"]["shards"] == 4
    # one preview from the commit, sampled across all shards' notes: the unsharded step's
    assert figures["preview"].count("data:image/jpeg;base64,") == 12
    assert meta[4][key]["preview"] == figures["preview"]
