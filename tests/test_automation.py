"""The external ``incoming`` asset shares the workflow's daily partitions, the folder sensor records
each new day as that day's partition, and declarative automation (``automation: eager|on_cron``)
runs the day once it is recorded: evaluated against a real instance on a tmp DAGSTER_HOME."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest
from conftest import REPO

from dagster_graphbook import FolderSensor, GraphbookWorkflow, build_definitions, daily_partitions
from dagster_graphbook.runner import get_instance
from dagster_graphbook.workflow import WorkflowError

SAMPLE = REPO / "workflows" / "sample.json"
SAMPLE_NODES = REPO / "custom_nodes" / "sample"
INCOMING = dg.AssetKey(["sample", "incoming"])
DAYS = {"2026-02-01": 2, "2026-02-02": 3}  # day folder -> files in it


def _defs(tmp_path: Path, incoming: Path, **kwargs) -> dg.Definitions:
    return build_definitions(
        [
            GraphbookWorkflow(
                SAMPLE,
                custom_nodes=[SAMPLE_NODES],
                partitions_def=daily_partitions("2026-01-01"),
                external_deps={"GenerateNumbers": [["sample", "incoming"]]},
                sensor=FolderSensor(incoming, asset_key="sample/incoming"),
                **kwargs,
            )
        ],
        notes_dir=str(tmp_path / "notes"),
        strict=True,
    )


def _incoming(tmp_path: Path) -> Path:
    incoming = tmp_path / "incoming"
    for day, files in DAYS.items():
        (incoming / day).mkdir(parents=True)
        for i in range(files):
            (incoming / day / f"img_{i}.png").write_bytes(b"x")
    return incoming


def _at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def test_incoming_is_partitioned_like_the_workflow(tmp_path):
    defs = _defs(tmp_path, _incoming(tmp_path))
    graph = defs.resolve_asset_graph()
    job = defs.resolve_job_def("sample")
    node = graph.get(INCOMING)
    assert not node.is_materializable and node.is_partitioned
    assert node.partitions_def == job.partitions_def
    for key in graph.get(INCOMING).child_keys:
        assert graph.get(key).partitions_def == node.partitions_def


def test_sensor_records_each_day_as_its_partition_and_eager_runs_the_latest(tmp_path):
    incoming = _incoming(tmp_path)
    defs = _defs(tmp_path, incoming, automation="eager")
    assert defs.schedules == [] or list(defs.schedules) == []  # eager replaces the schedule
    automation = defs.resolve_sensor_def("sample_automation")
    assert isinstance(automation, dg.AutomationConditionSensorDefinition)
    assert automation.default_status == dg.DefaultSensorStatus.RUNNING
    steps = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k != INCOMING]
    for key in steps:
        assert defs.resolve_assets_def(key).specs_by_key[key].automation_condition is not None
    instance = get_instance(str(tmp_path / "home"))

    # before the day is recorded its inputs are missing: nothing runs
    before = dg.evaluate_automation_conditions(
        defs, instance, evaluation_time=_at("2026-02-03T00:10")
    )
    assert before.total_requested == 0

    folder_sensor = defs.resolve_sensor_def("sample_new_folder")
    tick = folder_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert tick.run_requests == []  # the automation condition requests the runs, not the sensor
    for event in tick.asset_events:
        instance.report_runless_asset_event(event)  # what the sensor daemon does with them
    assert instance.get_materialized_partitions(INCOMING) == set(DAYS)
    for day, files in DAYS.items():
        [record] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=INCOMING, asset_partitions=[day]), limit=5
        ).records
        meta = record.asset_materialization.metadata
        assert meta["files"].value == files and meta["path"].value == str(incoming / day)

    after = dg.evaluate_automation_conditions(
        defs, instance, evaluation_time=_at("2026-02-03T00:11"), cursor=before.cursor
    )
    # the latest day (2026-02-02) of every step, in runs of that one partition
    assert {k: after.get_requested_partitions(k) for k in steps} == {
        k: {"2026-02-02"} for k in steps
    }
    assert {r.partition_key for r in after.run_requests} == {"2026-02-02"}

    again = dg.evaluate_automation_conditions(
        defs, instance, evaluation_time=_at("2026-02-03T00:12"), cursor=after.cursor
    )
    assert again.total_requested == 0  # requested once per new day


def test_on_cron_runs_after_the_workflows_hour_and_replaces_the_schedule(tmp_path):
    incoming = _incoming(tmp_path)
    defs = _defs(tmp_path, incoming, automation="on_cron", schedule_hour=2)
    assert list(defs.schedules) == []
    key = dg.AssetKey(["sample", "GenerateNumbers"])
    condition = defs.resolve_assets_def(key).specs_by_key[key].automation_condition
    assert "on_cron(0 2 * * *" in condition.get_label()
    instance = get_instance(str(tmp_path / "home"))
    first = dg.evaluate_automation_conditions(
        defs, instance, evaluation_time=_at("2026-02-03T01:00")
    )
    tick = defs.resolve_sensor_def("sample_new_folder").evaluate_tick(
        dg.build_sensor_context(instance=instance, definitions=defs)
    )
    past_two = first
    for event in tick.asset_events:
        instance.report_runless_asset_event(event)
    past_two = dg.evaluate_automation_conditions(
        defs, instance, evaluation_time=_at("2026-02-03T02:01"), cursor=first.cursor
    )
    assert past_two.get_requested_partitions(key) == set()  # recorded before the 02:00 tick
    instance.report_runless_asset_event(dg.AssetMaterialization(INCOMING, partition="2026-02-02"))
    later = dg.evaluate_automation_conditions(
        defs, instance, evaluation_time=_at("2026-02-03T02:05"), cursor=past_two.cursor
    )
    assert later.get_requested_partitions(key) == {"2026-02-02"}


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"automation": "eager", "schedule_hour": 2}, "replaces the schedule"),
        ({"automation": "hourly"}, "automation must be one of eager, on_cron, none"),
    ],
)
def test_bad_automation_is_a_clear_error_naming_the_workflow(tmp_path, kwargs, says):
    with pytest.raises(WorkflowError, match=says) as info:
        _defs(tmp_path, _incoming(tmp_path), **kwargs)
    assert "'sample'" in str(info.value) and str(SAMPLE) in str(info.value)


def test_automation_needs_the_sensors_asset(tmp_path):
    with pytest.raises(WorkflowError, match="sensor only records new days"):
        build_definitions(
            [
                GraphbookWorkflow(
                    SAMPLE,
                    custom_nodes=[SAMPLE_NODES],
                    partitions_def=daily_partitions("2026-01-01"),
                    sensor=FolderSensor(tmp_path / "incoming"),
                    automation="eager",
                )
            ],
            strict=True,
        )
