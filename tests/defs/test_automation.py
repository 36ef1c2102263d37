"""The external ``incoming`` asset shares the workflow's daily partitions, the folder sensor records
each new day as that day's partition, and declarative automation (``automation: eager|on_cron``)
runs the day once it is recorded: evaluated against a real instance on a tmp DAGSTER_HOME."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import FolderSensor, GraphbookWorkflow, build_definitions, daily_partitions
from dagster_graphbook.model.workflow import WorkflowError
from dagster_graphbook.runner.instance import get_instance
from tests.support.paths import REPO

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
    assert not list(defs.schedules or [])  # eager replaces the schedule
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
    assert after.total_requested == len(steps)  # nothing else (not the external incoming)

    again = dg.evaluate_automation_conditions(
        defs, instance, evaluation_time=_at("2026-02-03T00:12"), cursor=after.cursor
    )
    assert again.total_requested == 0  # requested once per new day


def test_on_cron_runs_after_the_workflows_hour_and_replaces_the_schedule(tmp_path):
    incoming = _incoming(tmp_path)
    defs = _defs(tmp_path, incoming, automation="on_cron", schedule_hour=2)
    assert not list(defs.schedules or [])
    key = dg.AssetKey(["sample", "GenerateNumbers"])
    condition = defs.resolve_assets_def(key).specs_by_key[key].automation_condition
    assert "on_cron(0 2 * * *" in condition.get_label()
    instance = get_instance(str(tmp_path / "home"))

    def tick(when: str, cursor):
        return dg.evaluate_automation_conditions(
            defs, instance, evaluation_time=_at(f"2026-02-0{when}"), cursor=cursor
        )

    result = tick("3T00:00", None)
    sensor = defs.resolve_sensor_def("sample_new_folder")
    for event in sensor.evaluate_tick(
        dg.build_sensor_context(instance=instance, definitions=defs)
    ).asset_events:
        instance.report_runless_asset_event(event)  # the day is recorded at 00:00, before 02:00
    result = tick("3T01:30", result.cursor)
    assert result.total_requested == 0  # the tick has not passed
    result = tick("3T02:01", result.cursor)
    assert result.get_requested_partitions(key) == {"2026-02-02"}  # the day recorded before it
    result = tick("3T02:05", result.cursor)
    assert result.total_requested == 0  # once per tick

    result = tick("4T02:01", result.cursor)  # the next day's input is not there yet: it waits
    assert result.total_requested == 0
    instance.report_runless_asset_event(dg.AssetMaterialization(INCOMING, partition="2026-02-03"))
    result = tick("4T03:00", result.cursor)
    assert result.get_requested_partitions(key) == {"2026-02-03"}


def test_a_condition_of_ones_own(tmp_path):
    condition = dg.AutomationCondition.on_missing()
    defs = _defs(tmp_path, _incoming(tmp_path), automation=condition)
    assert not list(defs.schedules or [])
    assert defs.resolve_sensor_def("sample_automation") is not None
    for key in defs.resolve_asset_graph().get_all_asset_keys() - {INCOMING}:
        assert defs.resolve_assets_def(key).specs_by_key[key].automation_condition == condition


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"automation": "eager", "schedule_hour": 2}, "replaces the schedule"),
        ({"automation": "hourly"}, "automation must be one of eager, on_cron, none"),
        (
            {"automation": dg.AutomationCondition.on_missing(), "cron_schedule": "0 3 * * *"},
            "an AutomationCondition replaces the schedule",
        ),
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


@pytest.mark.filterwarnings("ignore:Function `load_defs` is deprecated:DeprecationWarning")
def test_component_automation_eager(tmp_path):
    from tests.support.defs_folder import load_defs_folder
    from tests.support.nightly import NIGHTLY_YAML

    text = NIGHTLY_YAML.replace("      schedule_hour: 3\n", "      automation: eager\n")
    defs = load_defs_folder(tmp_path, "gb_automation_defs", {"nightly": text})
    assert not list(defs.schedules or [])
    assert sorted(s.name for s in defs.sensors) == [
        "nightly_shapes_automation",
        "nightly_shapes_new_folder",
    ]
    graph = defs.resolve_asset_graph()
    incoming = dg.AssetKey(["nightly_shapes", "incoming"])
    job = defs.resolve_job_def("nightly_shapes")
    assert graph.get(incoming).partitions_def == job.partitions_def
    for key in graph.get_all_asset_keys() - {incoming}:
        assert graph.get(key).automation_condition.get_label() == "eager"
    # automation's runs go through the implicit asset job: in one process, like the workflow's job
    from dagster_graphbook.defs.executor import graphbook_executor

    assert defs.resolve_implicit_global_asset_job_def().executor_def is graphbook_executor
    (tmp_path / "gb_automation_defs" / "nightly" / "incoming" / "2026-02-01").mkdir(parents=True)
    sensor = defs.resolve_sensor_def("nightly_shapes_new_folder")
    with dg.instance_for_test() as instance:
        tick = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert tick.run_requests == []
    assert [(e.asset_key, e.partition) for e in tick.asset_events] == [(incoming, "2026-02-01")]


@pytest.mark.filterwarnings("ignore:Function `load_defs` is deprecated:DeprecationWarning")
def test_repository_demo_incoming_shares_the_jobs_daily_partitions(monkeypatch):
    import importlib

    from dagster.components import load_defs

    monkeypatch.syspath_prepend(str(REPO))
    try:
        defs = load_defs(importlib.import_module("definitions"))
    finally:
        for name in [m for m in sys.modules if m == "definitions" or m.startswith("definitions.")]:
            del sys.modules[name]
    graph = defs.resolve_asset_graph()
    incoming = graph.get(dg.AssetKey(["nightly_shapes", "incoming"]))
    partitions = defs.resolve_job_def("nightly_shapes").partitions_def
    assert incoming.is_partitioned and incoming.partitions_def == partitions
    assert partitions.get_first_partition_key() == "2025-01-01"


@pytest.mark.long  # ~40 s (the automation sensor's 30 s ticks): handed out early
def test_dagster_daemon_runs_the_day_the_folder_sensor_records(tmp_path):
    """The real thing: ``dagster-daemon run`` ticks the folder sensor (records yesterday's folder
    as the incoming partition) and ``sample_automation`` (on by default) launches that day's run."""
    import os
    import signal
    import subprocess
    import textwrap
    import time

    yesterday = (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat()
    (tmp_path / "incoming").mkdir()
    (tmp_path / "defs.py").write_text(
        textwrap.dedent(
            f"""
            import dagster as dg
            from dagster_graphbook import (
                FolderSensor, GraphbookWorkflow, build_definitions, daily_partitions
            )
            defs = build_definitions([GraphbookWorkflow(
                {str(SAMPLE)!r}, custom_nodes=[{str(SAMPLE_NODES)!r}],
                partitions_def=daily_partitions("2026-01-01"),
                external_deps={{"GenerateNumbers": [["sample", "incoming"]]}},
                sensor=FolderSensor({str(tmp_path / "incoming")!r}, asset_key="sample/incoming",
                    minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING),
                automation="eager",
                job_tags={{"graphbook/team": "vision"}},
            )], notes_dir={str(tmp_path / "notes")!r})
            """
        )
    )
    (tmp_path / "workspace.yaml").write_text("load_from:\n  - python_file: defs.py\n")
    home = tmp_path / "home"
    get_instance(str(home)).dispose()
    daemon = os.path.join(os.path.dirname(sys.executable), "dagster-daemon")
    with open(tmp_path / "daemon.log", "w") as log:
        proc = subprocess.Popen(
            [daemon, "run", "-w", "workspace.yaml"],
            cwd=tmp_path,
            env={**os.environ, "DAGSTER_HOME": str(home)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        # eager counts what is there at its first evaluation as handled: the day arrives after it
        deadline = time.monotonic() + 120
        while (
            "Finished auto-materialization tick for sample_automation"
            not in (tmp_path / "daemon.log").read_text()
        ):
            assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-3000:]
            time.sleep(1)
        (tmp_path / "incoming" / f".{yesterday}.tmp").mkdir()
        (tmp_path / "incoming" / f".{yesterday}.tmp" / "a.png").write_bytes(b"x")
        (tmp_path / "incoming" / f".{yesterday}.tmp").rename(tmp_path / "incoming" / yesterday)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            deadline = time.monotonic() + 180
            runs = []
            while time.monotonic() < deadline:
                runs = instance.get_runs()
                if runs and runs[0].status in (
                    dg.DagsterRunStatus.SUCCESS,
                    dg.DagsterRunStatus.FAILURE,
                ):
                    break
                time.sleep(2)
            assert runs, (tmp_path / "daemon.log").read_text()[-3000:]
            [run] = runs
            assert run.status == dg.DagsterRunStatus.SUCCESS
            assert run.tags["dagster/partition"] == yesterday
            assert run.tags.get("dagster/from_automation_condition") == "true"
            assert run.tags["graphbook/team"] == "vision"  # the job's tags
            assert instance.get_materialized_partitions(INCOMING) == {yesterday}
            key = dg.AssetKey(["sample", "GenerateNumbers"])
            assert instance.get_materialized_partitions(key) == {yesterday}
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
