"""The folder sensor under bad folder names: impossible dates, late days,
links."""

from __future__ import annotations

import json
import os

import dagster as dg

from dagster_graphbook import FolderSensor, GraphbookWorkflow, build_definitions, daily_partitions
from dagster_graphbook.defs.schedules import day_folders
from tests.support.paths import REPO

SAMPLE = REPO / "workflows" / "sample.json"
SAMPLE_NODES = REPO / "custom_nodes" / "sample"


def _sensor(tmp_path):
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    spec = GraphbookWorkflow(
        SAMPLE,
        custom_nodes=[SAMPLE_NODES],
        partitions_def=daily_partitions("2026-01-01"),
        sensor=FolderSensor(incoming),
    )
    defs = build_definitions([spec], notes_dir=str(tmp_path / "notes"))
    return incoming, defs.resolve_sensor_def("sample_new_folder"), defs


def _tick(sensor, defs, instance, cursor=None):
    return sensor.evaluate_tick(
        dg.build_sensor_context(instance=instance, definitions=defs, cursor=cursor)
    )


def test_an_impossible_date_is_skipped_and_reported_not_a_stall(tmp_path):
    incoming, sensor, defs = _sensor(tmp_path)
    for day in ("2026-02-27", "2026-02-30", "2026-03-01"):
        (incoming / day).mkdir()
    with dg.instance_for_test() as instance:
        tick = _tick(sensor, defs, instance)
    assert [r.partition_key for r in tick.run_requests] == ["2026-02-27", "2026-03-01"]
    assert "2026-02-30" not in tick.cursor
    assert day_folders(incoming)[1] == [
        "2026-02-30: not a date"
    ]  # what the sensor logs as a warning


def test_a_day_that_arrives_late_is_picked_up(tmp_path):
    incoming, sensor, defs = _sensor(tmp_path)
    for day in ("2026-02-01", "2026-02-03"):
        (incoming / day).mkdir()
    with dg.instance_for_test() as instance:
        first = _tick(sensor, defs, instance)
        assert [r.partition_key for r in first.run_requests] == ["2026-02-01", "2026-02-03"]
        (incoming / "2026-02-02").mkdir()  # the NFS copy of an earlier day finished late
        late = _tick(sensor, defs, instance, first.cursor)
        assert [r.partition_key for r in late.run_requests] == ["2026-02-02"]
        assert json.loads(late.cursor) == ["2026-02-01", "2026-02-02", "2026-02-03"]
        assert _tick(sensor, defs, instance, late.cursor).run_requests == []
        # a cursor written by the previous version (the latest day) still means "up to that day"
        assert _tick(sensor, defs, instance, "2026-02-03").run_requests == []


def test_a_day_named_link_leading_outside_the_folder_is_refused(tmp_path):
    incoming, sensor, defs = _sensor(tmp_path)
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    os.symlink(secret, incoming / "2026-02-05")
    (incoming / "2026-02-06").mkdir()
    with dg.instance_for_test() as instance:
        tick = _tick(sensor, defs, instance)
    assert [r.partition_key for r in tick.run_requests] == ["2026-02-06"]
    [problem] = day_folders(incoming)[1]
    assert problem.startswith("2026-02-05: a link to") and "outside" in problem
