"""Seeing the data in Dagster: the nightly demo's materializations carry thumbnails of the images
each step produced, and a failed item shows its picture (or says it does not open), on a real
instance with the CNN trained by the ``project`` fixture and images drawn by the demo's generator.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path
from typing import Any, Dict

import dagster as dg
from PIL import Image

from dagster_graphbook.store.previews import NOT_AN_IMAGE
from tests.support.nightly import shapes_data
from tests.support.nodes import copy_nodes
from tests.support.paths import REPO

WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"
DAY = "2026-05-03"
URI = re.compile(r"!\[([^\]]*)\]\(data:image/jpeg;base64,([A-Za-z0-9+/=]+)\)")


def _params(project: Dict[str, Any], folder: Path, tmp_path: Path) -> Dict[str, Any]:
    return {
        "IncomingImages.folder": str(folder),
        "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
        "SaveResized.output_dir": str(tmp_path / "outputs"),
        "ReviewSplit.threshold": 0.999,  # most notes to review: the pin the issue looks at
    }


def _materializations(home: str, run_id: str) -> Dict[str, Dict[str, dg.MetadataValue]]:
    with dg.DagsterInstance.from_config(home) as instance:
        records = instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
    return {
        r.asset_materialization.asset_key.to_user_string(): dict(r.asset_materialization.metadata)
        for r in records
        if r.asset_materialization is not None
    }


def _thumbs(markdown: str):
    return [
        (alt, Image.open(io.BytesIO(base64.b64decode(data)))) for alt, data in URI.findall(markdown)
    ]


def test_a_day_shows_thumbnails_of_each_pin_with_label_and_confidence(
    project, tmp_path, run_wf, dagster_home
):
    folder = shapes_data().make_day(tmp_path / "incoming", DAY, 30)
    run = run_wf(WORKFLOW, [NODES], _params(project, folder, tmp_path))
    assert run.success, run.failure
    meta = _materializations(dagster_home, run.run_id)

    review = meta["nightly_shapes/ReviewSplit/review"]
    sheet = review["preview"]
    assert isinstance(sheet, dg.MarkdownMetadataValue)
    thumbs = _thumbs(sheet.value)
    rows = review["dagster/row_count"].value
    assert len(thumbs) == min(12, rows) and rows > 12
    assert all(t.format == "JPEG" and max(t.size) <= 96 for _, t in thumbs)
    labels = {"circle", "square", "triangle"}
    for caption, _ in thumbs:  # "<label> · <confidence>"
        label, confidence = caption.split(" · ")
        assert label in labels and 0 <= float(confidence) < 0.999, caption
    assert len(sheet.value.encode()) <= 64 * 1024
    # the sink's Parquet head stays beside the pictures
    assert isinstance(review["table_preview"], dg.TableMetadataValue)
    assert review["table_path"].value.endswith(".parquet")

    classify = meta["nightly_shapes/ClassifyShapes"]["preview"].value
    assert len(_thumbs(classify)) == 12 and "12 of 30 images" in classify
    # SaveResized's notes hold the input image (64 px) and the copy its dump_fn wrote (48 px):
    # the preview shows what the step made, the copies, captioned with their file names
    saved = meta["nightly_shapes/SaveResized"]
    if saved["dagster/row_count"].value:
        copies = _thumbs(saved["preview"].value)
        assert copies and all(t.size == (48, 48) for _, t in copies)
        assert all(caption.endswith(".png") for caption, _ in copies)


def test_preview_off_leaves_the_metadata_as_before(project, tmp_path, run_wf, dagster_home):
    folder = shapes_data().make_day(tmp_path / "incoming", DAY, 8)
    run = run_wf(WORKFLOW, [NODES], _params(project, folder, tmp_path), preview=False)
    assert run.success, run.failure
    meta = _materializations(dagster_home, run.run_id)
    assert "preview" not in meta["nightly_shapes/ClassifyShapes"]
    review = meta["nightly_shapes/ReviewSplit/review"]
    assert isinstance(review["preview"], dg.TableMetadataValue)  # the sink's first rows, as before
    assert "table_preview" not in review


def _with_a_corrupt_image(tmp_path: Path) -> Path:
    folder = shapes_data().make_day(tmp_path / "incoming", DAY, 6)
    good = sorted(folder.glob("*.png"))
    broken = folder / ("zz_" + good[0].name)
    broken.write_bytes(good[0].read_bytes()[:40])  # a truncated PNG: its header, no pixels
    return broken


def test_a_failed_item_that_does_not_open_says_so_in_the_failure(
    project, tmp_path, run_wf, dagster_home
):
    broken = _with_a_corrupt_image(tmp_path)
    run = run_wf(WORKFLOW, [NODES], _params(project, broken.parent, tmp_path))
    assert not run.success
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        failure = next(
            e
            for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
            if e.dagster_event is not None
        ).dagster_event
    data = failure.step_failure_data
    assert data is not None and data.user_failure_data is not None
    meta = data.user_failure_data.metadata
    assert broken.name in meta["item"].value
    picture = meta["item_preview"]  # a sentence, shown as it is in the failure's metadata
    assert isinstance(picture, dg.TextMetadataValue)
    assert picture.value == f"{broken} {NOT_AN_IMAGE} (UnidentifiedImageError)"


def test_skipped_items_show_their_pictures_on_the_step_materialization(
    project, tmp_path, run_wf, dagster_home
):
    broken = _with_a_corrupt_image(tmp_path)
    params = {
        **_params(project, broken.parent, tmp_path),
        "ClassifyShapes.runtime.on_item_error": "skip",
    }
    run = run_wf(WORKFLOW, [NODES], params)
    assert run.success, run.failure
    classify = _materializations(dagster_home, run.run_id)["nightly_shapes/ClassifyShapes"]
    assert classify["errors_skipped"].value == 1
    pictures = classify["errors_preview"].value
    assert "load\\_fn failed" in pictures and NOT_AN_IMAGE in pictures


def test_paths_a_preview_must_not_open_leave_the_run_to_end(tmp_path, listener):
    """A FIFO named ``fifo.png`` (reading it would block for ever), an ``http://`` URL to a
    listener of the test's own and an EXIF-rotated JPEG, in a step that only passes paths along:
    the run ends, the preview says what it skipped, no connection arrives, the JPEG is upright."""
    import os
    import threading

    from dagster_graphbook import run_workflow
    from dagster_graphbook.store.previews import SKIPPED
    from tests.support.workflows import step_node, write_workflow

    good, rotated, fifo = tmp_path / "good.png", tmp_path / "rotated.jpg", tmp_path / "fifo.png"
    Image.new("RGB", (40, 40), (0, 200, 0)).save(good)
    stored = Image.new("RGB", (80, 40), (0, 0, 255))  # shown 40x80 (orientation 6)
    stored.paste((255, 0, 0), (0, 0, 16, 16))  # ... the red block top right
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(rotated, exif=exif.tobytes(), quality=95)
    os.mkfifo(fifo)
    url = f"http://127.0.0.1:{listener.port}/track.png"
    nodes = copy_nodes(tmp_path / "nodes", "paths_nodes.py", "hostile_previews")
    wf = write_workflow(tmp_path, "paths", [step_node("0", "Paths", source=True)], [])
    ran: Dict[str, Any] = {}
    run = threading.Thread(
        target=lambda: ran.update(
            run=run_workflow(
                wf,
                custom_nodes=[nodes],
                params={"Paths.paths": "|".join(map(str, (good, fifo, url, rotated)))},
                dagster_home=str(tmp_path / "home"),
                executor="in_process",
            )
        ),
        daemon=True,
    )
    try:
        run.start()
        run.join(120)
        assert not run.is_alive(), "the run did not end: the preview blocked"
    finally:
        try:  # frees a reader left blocked on the FIFO
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert ran["run"].success, ran["run"].failure
    assert listener.connections == []
    meta = _materializations(str(tmp_path / "home"), ran["run"].run_id)["paths/Paths"]
    text = meta["preview"].value.replace("\\", "")
    assert f"note 1: {SKIPPED}: a FIFO, not a regular file" in text
    assert f"note 2: {SKIPPED}: a URL (http://), not opened" in text
    (_, green), (_, upright) = _thumbs(meta["preview"].value)
    assert upright.size == (40, 80) and green.size == (40, 40)
    red = upright.convert("RGB").getpixel((36, 3))
    assert red[0] > 180 and red[2] < 80, red
