"""docs/nightly.md's nightly workflow in Python, run as written: the day named only in the step
classes' own defaults, and ``runtime=`` making "skip bad images" what every run starts from."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
from PIL import Image

from tests.e2e.test_documented_examples import doc_section, run_commands

DAY = "2026-02-03"
GOOD = 12


def _write_day(folder: Path) -> None:
    """``GOOD`` small JPEGs and one corrupt one (a JPEG header, then garbage)."""
    folder.mkdir(parents=True)
    for i in range(GOOD):
        Image.new("RGB", (40, 30), (i * 20, 90, 200)).save(folder / f"img{i:02d}.jpg")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")


def test_the_nightly_python_workflow_fills_the_day_into_class_defaults_and_skips_a_bad_image(
    tmp_path,
):
    """The docs' files and command: exit 0, one thumbnail per good image in the day's folder,
    no literal ``{partition_key}`` folder anywhere, the corrupt file recorded as a skipped item
    (named in the metadata's errors), and the schedule's run and the launchpad start from the
    workflow's ``runtime=`` (skip), not from the settings' default (raise)."""
    files, commands = doc_section(
        "nightly.md", "### A nightly workflow in Python: the day in a step's defaults"
    )
    assert set(files) == {"day_nodes.py", "day_flow.py", "day_definitions.py"}, files
    assert all(f"--partition {DAY}" in c for c in commands), commands
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    _write_day(tmp_path / "incoming" / DAY)
    done = run_commands(tmp_path, commands)
    said = done.stdout + done.stderr

    written = sorted(p.name for p in (tmp_path / "thumbnails" / DAY).iterdir())
    assert written == [f"img{i:02d}.png" for i in range(GOOD)], said
    literal = [str(p) for p in tmp_path.rglob("*") if "{partition_key}" in str(p)]
    assert literal == [], literal
    assert "broken.jpg" in said and "skipped" in said, said

    with dg.DagsterInstance.from_config(str(tmp_path / ".dagster_home")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["day_flow", "Thumbnails"]))
        assert event is not None and event.asset_materialization is not None
        metadata = event.asset_materialization.metadata
    assert metadata["errors_skipped"].value == 1, metadata
    assert "broken.jpg" in str(metadata["errors"].value), metadata["errors"]
    assert metadata["files_written"].value == GOOD

    # what the schedule's runs and the launchpad start from: the workflow's runtime=
    sys.path.insert(0, str(tmp_path))
    ours = ("day_definitions", "day_nodes")  # a test before may have imported a module so named
    try:
        for name in ours:
            sys.modules.pop(name, None)
        from day_definitions import defs  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
        for name in ours:
            sys.modules.pop(name, None)
    job = defs.resolve_job_def("day_flow")
    for node in job.graph.nodes:
        runtime = node.definition.config_schema.config_type.fields["runtime"].default_value
        assert runtime["on_item_error"] == "skip", (node.name, runtime)
    thumbnails = job.graph.node_named("day_flow__Thumbnails").definition.config_schema
    assert thumbnails.config_type.fields["runtime"].default_value["max_skipped_fraction"] == 0.1
    schedule = defs.resolve_schedule_def("day_flow_nightly")
    with dg.instance_for_test() as instance:
        tick = datetime(2026, 2, 4, 2, tzinfo=UTC)
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
        requests = schedule.evaluate_tick(context).run_requests or []
    assert [r.partition_key for r in requests] == [DAY]
    assert "runtime" not in str(requests[0].run_config)  # the job's defaults decide
