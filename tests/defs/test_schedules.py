"""Partitions, schedules and the folder sensor of workflows, evaluated through Dagster's own test
contexts."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import FolderSensor, GraphbookWorkflow, build_definitions, daily_partitions
from tests.support.nodes import copy_nodes
from tests.support.paths import REPO

SAMPLE = REPO / "workflows" / "sample.json"
SAMPLE_NODES = REPO / "custom_nodes" / "sample"


def _at(day: str, hour: int = 2) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(hour=hour, tzinfo=dt.UTC)


def _defs(tmp_path: Path, **kwargs) -> dg.Definitions:
    return build_definitions(
        [GraphbookWorkflow(SAMPLE, custom_nodes=[SAMPLE_NODES], **kwargs)],
        notes_dir=str(tmp_path / "notes"),
    )


def test_nightly_schedule_runs_the_previous_day(tmp_path):
    defs = _defs(tmp_path, partitions_def=daily_partitions("2026-01-01"), schedule_hour=2)
    schedule = defs.resolve_schedule_def("sample_nightly")
    assert schedule.cron_schedule == "0 2 * * *"
    with dg.instance_for_test() as instance:
        for when, expected in (("2026-03-01", "2026-02-28"), ("2026-03-02", "2026-03-01")):
            data = schedule.evaluate_tick(
                dg.build_schedule_context(instance=instance, scheduled_execution_time=_at(when))
            )
            assert [r.partition_key for r in data.run_requests] == [expected]


def test_cron_schedule_with_and_without_partitions(tmp_path):
    partitioned_defs = _defs(
        tmp_path, partitions_def=daily_partitions("2026-01-01"), cron_schedule="30 6 * * *"
    )
    partitioned = partitioned_defs.resolve_schedule_def("sample_schedule")
    plain = _defs(tmp_path, cron_schedule="*/15 * * * *").resolve_schedule_def("sample_schedule")
    assert (partitioned.cron_schedule, plain.cron_schedule) == ("30 6 * * *", "*/15 * * * *")
    with dg.instance_for_test() as instance:
        repo = partitioned_defs.get_repository_def()
        for when, expected in (
            (_at("2026-03-10", 6).replace(minute=30), "2026-03-09"),
            (_at("2026-01-01", 6), None),
        ):
            data = partitioned.evaluate_tick(
                dg.build_schedule_context(
                    instance=instance, scheduled_execution_time=when, repository_def=repo
                )
            )
            assert [r.partition_key for r in data.run_requests or []] == (
                [expected] if expected else []
            )
        data = plain.evaluate_tick(
            dg.build_schedule_context(instance=instance, scheduled_execution_time=_at("2026-03-10"))
        )
        assert len(data.run_requests) == 1 and data.run_requests[0].partition_key is None


def test_partitioned_job_and_assets(tmp_path):
    defs = _defs(tmp_path, partitions_def=daily_partitions("2026-01-01"))
    job = defs.resolve_job_def("sample")
    assert (
        job.partitions_def is not None
        and job.partitions_def.get_first_partition_key() == "2026-01-01"
    )
    for key in defs.resolve_asset_graph().get_all_asset_keys():
        assert defs.resolve_assets_def(key).partitions_def == job.partitions_def


def _sensor(tmp_path: Path, start: str = "2026-01-01") -> tuple:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    defs = _defs(tmp_path, partitions_def=daily_partitions(start), sensor=FolderSensor(incoming))
    return incoming, defs.resolve_sensor_def("sample_new_folder"), defs


def test_folder_sensor_starts_one_run_per_new_day(tmp_path):
    incoming, sensor, defs = _sensor(tmp_path)
    for day in ("2026-02-01", "2026-02-02"):
        (incoming / day).mkdir()
    (incoming / ".2026-02-03.tmp-abc").mkdir()  # a day still being written
    (incoming / "notes").mkdir()  # not a day
    with dg.instance_for_test() as instance:
        first = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
        assert [(r.run_key, r.partition_key) for r in first.run_requests] == [
            ("2026-02-01", "2026-02-01"),
            ("2026-02-02", "2026-02-02"),
        ]
        assert json.loads(first.cursor) == ["2026-02-01", "2026-02-02"]  # the days requested

        again = sensor.evaluate_tick(
            dg.build_sensor_context(instance=instance, definitions=defs, cursor=first.cursor)
        )
        assert again.run_requests == [] and "no new dated folder" in (again.skip_message or "")

        (incoming / "2026-02-03").mkdir()
        new = sensor.evaluate_tick(
            dg.build_sensor_context(instance=instance, definitions=defs, cursor=first.cursor)
        )
        assert [r.partition_key for r in new.run_requests] == ["2026-02-03"] and json.loads(
            new.cursor
        )[-1] == "2026-02-03"
        assert new.run_requests[0].tags["dagster_graphbook/folder"] == str(incoming / "2026-02-03")


def test_folder_sensor_waits_for_todays_partition_and_skips_days_before_the_first(tmp_path):
    incoming, sensor, defs = _sensor(tmp_path, start="2026-02-01")
    today = dt.datetime.now(dt.UTC).date()
    yesterday = (today - dt.timedelta(days=1)).isoformat()
    for day in ("2026-01-15", yesterday, today.isoformat()):
        (incoming / day).mkdir()
    with dg.instance_for_test() as instance:
        tick = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
        # 2026-01-15 precedes the partitions: skipped; today has no partition yet: left for a later
        # tick
        assert [r.partition_key for r in tick.run_requests] == [yesterday]
        assert json.loads(tick.cursor) == ["2026-01-15", yesterday]
        later = sensor.evaluate_tick(
            dg.build_sensor_context(instance=instance, definitions=defs, cursor=tick.cursor)
        )
        assert later.run_requests == [] and json.loads(later.cursor) == ["2026-01-15", yesterday]


def test_folder_sensor_records_each_new_day_as_the_external_asset(tmp_path):
    incoming = tmp_path / "incoming"
    (incoming / "2026-02-01").mkdir(parents=True)
    for name, size in (("a.png", 10), ("b.png", 32)):
        (incoming / "2026-02-01" / name).write_bytes(b"x" * size)
    defs = _defs(
        tmp_path,
        partitions_def=daily_partitions("2026-01-01"),
        external_deps={"GenerateNumbers": [["sample", "incoming"]]},
        sensor=FolderSensor(incoming, asset_key="sample/incoming"),
    )
    sensor = defs.resolve_sensor_def("sample_new_folder")
    with dg.instance_for_test() as instance:
        tick = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert [r.partition_key for r in tick.run_requests] == ["2026-02-01"]
    [event] = tick.asset_events
    assert event.asset_key == dg.AssetKey(["sample", "incoming"])
    assert (
        event.metadata["day"].value == "2026-02-01"
        and event.metadata["files"].value == 2
        and event.metadata["bytes"].value == 42
    )
    assert event.metadata["path"].value == str(incoming / "2026-02-01")


def test_folder_sensor_without_partitions_and_missing_folder(tmp_path):
    incoming = tmp_path / "not_there_yet"
    defs = _defs(
        tmp_path, sensor=FolderSensor(incoming, name="sample_folders", minimum_interval_seconds=5)
    )
    sensor = defs.resolve_sensor_def("sample_folders")
    assert (
        sensor.minimum_interval_seconds == 5
        and sensor.default_status == dg.DefaultSensorStatus.STOPPED
    )
    with dg.instance_for_test() as instance:
        assert (
            sensor.evaluate_tick(
                dg.build_sensor_context(instance=instance, definitions=defs)
            ).run_requests
            == []
        )
        (incoming / "2026-02-01").mkdir(parents=True)
        tick = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
        assert [(r.run_key, r.partition_key) for r in tick.run_requests] == [("2026-02-01", None)]


def test_files_sensor_runs_each_change_of_a_growing_folder_once(tmp_path):
    """``watch="files"``: a run per change of the files under the folder (added, replaced,
    removed, in subfolders too), none while it stays the same, and one again for a folder back
    to an earlier state (a count in the run key); refused for a partitioned workflow."""
    folder = tmp_path / "raw"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("a")
    defs = _defs(tmp_path, sensor=FolderSensor(folder, watch="files"))
    sensor = defs.resolve_sensor_def("sample_new_files")
    keys, cursor = [], None

    def tick() -> None:
        nonlocal cursor
        with dg.instance_for_test() as instance:
            done = sensor.evaluate_tick(
                dg.build_sensor_context(instance=instance, definitions=defs, cursor=cursor)
            )
        cursor = done.cursor
        keys.append([r.run_key for r in done.run_requests])

    tick()  # a.txt
    tick()  # nothing new
    (folder / "sub" / "b.txt").write_text("b")
    tick()
    (folder / "sub" / "b.txt").unlink()  # back to the first state
    tick()
    (folder / ".hidden").write_text("an editor's file")
    tick()
    assert [len(k) for k in keys] == [1, 0, 1, 1, 0]
    assert len({k[0] for k in keys if k}) == 3
    with pytest.raises(ValueError, match="watch='files' is for an unpartitioned workflow"):
        _defs(
            tmp_path,
            sensor=FolderSensor(folder, watch="files"),
            partitions_def=daily_partitions("2026-01-01"),
        )


def test_bad_executor_is_a_clear_error(tmp_path):
    from dagster_graphbook import WorkflowError

    spec = GraphbookWorkflow(SAMPLE, custom_nodes=[SAMPLE_NODES], executor="threads")
    with pytest.raises(WorkflowError, match="executor must be one of in_process, multiprocess"):
        build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)
    # without strict the code location loads, and the job says why it cannot run
    job = build_definitions([spec], notes_dir=str(tmp_path / "notes")).resolve_job_def("sample")
    assert "executor must be one of in_process, multiprocess" in job.description


def test_partition_key_reaches_steps(tmp_path, wf_builders):
    """``{partition_key}`` in string parameters (workflow value and run config) and
    ``self.partition_key``."""
    b = wf_builders
    nodes = b["write_nodes"](
        tmp_path / "nodes",
        "day_nodes.py",
        """
        from graphbook.steps import SourceStep

        class DaySource(SourceStep):
            RequiresInput = False
            Outputs = ["out"]
            Parameters = {"path": {"type": "string"}, "other": {"type": "string"}}

            def __init__(self, path, other):
                super().__init__()
                self.path, self.other = path, other

            def load(self):
                note = {"path": self.path, "other": self.other, "key": self.partition_key}
                return {"out": [note]}
    """,
    )
    wf = b["write_workflow"](
        tmp_path,
        "days",
        [
            b["step_node"](
                "0", "DaySource", {"path": "in/{partition_key}/x", "other": "none"}, source=True
            )
        ],
        [],
    )
    defs = build_definitions(
        [
            GraphbookWorkflow(
                wf, custom_nodes=[nodes], partitions_def=daily_partitions("2026-01-01")
            )
        ],
        notes_dir=str(tmp_path / "notes"),
    )
    config = {"ops": {"days__DaySource": {"config": {"other": "set-{partition_key}"}}}}
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, partition_key="2026-02-03", run_config=config
        )
    assert result.success
    import pickle

    notes = pickle.loads(
        (
            tmp_path / "notes" / "days" / "DaySource" / "2026-02-03" / f"{result.run_id}.pkl"
        ).read_bytes()
    )
    assert notes == [{"path": "in/2026-02-03/x", "other": "set-2026-02-03", "key": "2026-02-03"}]


@pytest.mark.parametrize("source", ["json", "graph"])
def test_partition_key_in_a_step_class_default_is_filled_and_refused_without_a_key(
    tmp_path, wf_builders, source
):
    """A parameter the workflow leaves at the class's default (its ``Parameters`` default, or
    only its ``__init__`` default) holding ``{partition_key}``: a run of a day gets the day, the
    launchpad shows the placeholder as the default, and a run with no key is refused naming
    ``STEP.PARAM`` instead of reading and writing a literal ``{partition_key}`` folder."""
    from dagster_graphbook import run_workflow
    from dagster_graphbook.errors import RequestError

    b = wf_builders
    nodes = copy_nodes(tmp_path / "nodes", "class_default_nodes.py", "day_class_default")
    if source == "json":
        wf = b["write_workflow"](
            tmp_path,
            "days",
            [b["step_node"]("0", "DaySource", {}, source=True), b["step_node"]("1", "DayWriter")],
            [b["edge"]("0", "out", "1")],
        )
    else:
        wf = tmp_path / "days.py"
        wf.write_text(
            "from graphbook import Graph\nfrom class_default_nodes import DaySource, DayWriter\n\n"
            "g = Graph()\n\n\n@g()\ndef _():\n    s = g.step(DaySource)\n"
            "    w = g.step(DayWriter)\n    w.bind(s)\n"
        )
    spec = GraphbookWorkflow(
        wf, custom_nodes=[nodes], partitions_def=daily_partitions("2026-01-01")
    )
    defs = build_definitions([spec], notes_dir=str(tmp_path / "notes"))
    job = defs.resolve_job_def("days")
    fields = job.graph.node_named("days__DayWriter").definition.config_schema.config_type.fields
    assert fields["out_dir"].default_value == "out/{partition_key}"  # the launchpad shows it
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, partition_key="2026-02-03")
        assert result.success
        notes = result.output_for_node("days__DayWriter", "out")
    assert notes == [{"path": "in/2026-02-03/x", "out_dir": "out/2026-02-03"}]

    unpartitioned = GraphbookWorkflow(wf, custom_nodes=[nodes])
    with pytest.raises(RequestError, match=r"DaySource\.path 'in/\{partition_key\}/x'"):
        run_workflow(wf, [nodes], instance=None, dagster_home=str(tmp_path / "home"))
    plain = build_definitions([unpartitioned], notes_dir=str(tmp_path / "notes2"))
    with dg.instance_for_test() as instance:
        refused = plain.resolve_job_def("days").execute_in_process(
            instance=instance, raise_on_error=False
        )
    assert not refused.success
    failure = refused.failure_data_for_node("days__DaySource") or refused.failure_data_for_node(
        "days__DayWriter"
    )
    said = str(failure.error.message) if failure else str(refused.all_events)
    assert "{partition_key}" in said and "no partition key" in said, said


def test_partition_key_in_a_resource_class_default_is_filled_and_refused_without_a_key(
    tmp_path, wf_builders
):
    """A resource node's parameter left at its ``__init__`` default ``models/{partition_key}.pt``:
    the run of a day builds the resource with that day's path; a run with no key fails before
    the resource is built, naming ``RESOURCE.PARAM``."""
    b = wf_builders
    nodes = copy_nodes(tmp_path / "nodes", "day_resource.py", "day_resource")
    wf = b["write_workflow"](
        tmp_path,
        "days",
        [b["resource_node"]("0", "DayModel"), b["step_node"]("1", "UsesModel", source=True)],
        [b["edge"]("0", "resource", "1", "model")],
    )
    spec = GraphbookWorkflow(
        wf, custom_nodes=[nodes], partitions_def=daily_partitions("2026-01-01")
    )
    job = build_definitions([spec], notes_dir=str(tmp_path / "notes")).resolve_job_def("days")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, partition_key="2026-02-03")
        assert result.success
        assert result.output_for_node("days__UsesModel", "out") == [
            {"model": "models/2026-02-03.pt"}
        ]
    plain = build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes])], notes_dir=str(tmp_path / "notes2")
    ).resolve_job_def("days")
    with dg.instance_for_test() as instance:
        refused = plain.execute_in_process(instance=instance, raise_on_error=False)
    assert not refused.success
    said = ""
    for event in refused.all_events:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None:  # the resource's failure is the cause of Dagster's
            said += error.message
            error = error.cause
    assert "DayModel.checkpoint 'models/{partition_key}.pt'" in said, said
    assert "no partition key" in said, said


def test_partition_key_in_inherited_path_and_list_class_defaults_is_filled_or_refused(
    tmp_path, wf_builders
):
    """The defaults a first fix missed: one a subclass inherits through ``**kwargs``, a
    ``Path``, and strings in a list. A run of a day fills each; one with no key is refused
    naming all three, before any step."""
    from dagster_graphbook import run_workflow
    from dagster_graphbook.errors import RequestError

    b = wf_builders
    nodes = copy_nodes(tmp_path / "nodes", "inherited_nodes.py", "day_inherited")
    chain = ["Src", "Child", "PathDefault", "ListDefault"]
    wf = b["write_workflow"](
        tmp_path,
        "kinds",
        [b["step_node"](str(i), n, source=i == 0) for i, n in enumerate(chain)],
        [b["edge"](str(i), "out", str(i + 1)) for i in range(len(chain) - 1)],
    )
    spec = GraphbookWorkflow(
        wf, custom_nodes=[nodes], partitions_def=daily_partitions("2026-01-01")
    )
    job = build_definitions([spec], notes_dir=str(tmp_path / "notes")).resolve_job_def("kinds")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, partition_key="2026-02-03")
        assert result.success
        notes = result.output_for_node("kinds__ListDefault", "out")
    assert notes == [
        {"dest": "base/2026-02-03", "out_dir": "pd/2026-02-03", "paths": ["a/2026-02-03", "b"]}
    ]
    with pytest.raises(RequestError) as refused:
        run_workflow(wf, [nodes], dagster_home=str(tmp_path / "home"))
    for param in ("Child.dest", "PathDefault.out_dir", "ListDefault.paths"):
        assert param in str(refused.value), str(refused.value)


def test_materialize_sets_a_resource_that_only_another_resource_uses(tmp_path, wf_builders):
    """``--set Cfg.root=...`` on a code location's job, Cfg bound to resource Outer's parameter
    (no step uses Cfg directly): refused before, while ``run --set`` took it."""
    from dagster_graphbook.runner.run_config import job_config as _job_config
    from dagster_graphbook.runner.run_config import tagged_steps as _tagged_steps

    b = wf_builders
    nodes = b["write_nodes"](
        tmp_path / "nodes",
        "nested_nodes.py",
        """
        from graphbook.resources import Resource
        from graphbook.steps import SourceStep

        class Cfg(Resource):
            Parameters = {"root": {"type": "string", "default": "r"}}

            def __init__(self, root="r"):
                super().__init__(root)
                self.root = root

            def value(self):
                return self.root

        class Outer(Resource):
            Parameters = {"cfg": {"type": "resource"}}

            def __init__(self, cfg=None):
                super().__init__(cfg)
                self.cfg = cfg

            def value(self):
                return f"outer({self.cfg})"

        class Use(SourceStep):
            RequiresInput = False
            Outputs = ["out"]
            Parameters = {"model": {"type": "resource"}}

            def __init__(self, model=None):
                super().__init__()
                self.model = model

            def load(self):
                return {"out": [{"model": self.model}]}
        """,
    )
    wf = b["write_workflow"](
        tmp_path,
        "nested",
        [
            b["resource_node"]("1", "Cfg"),
            b["resource_node"]("2", "Outer"),
            b["step_node"]("3", "Use", source=True),
        ],
        [b["edge"]("1", "resource", "2", "cfg"), b["edge"]("2", "resource", "3", "model")],
    )
    defs = build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes])], notes_dir=str(tmp_path / "notes")
    )
    job = defs.resolve_job_def("nested")
    config = _job_config(job, _tagged_steps(job), {"Cfg.root": "elsewhere"}, None, None)
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, run_config=config)
        assert result.success
        assert result.output_for_node("nested__Use", "out") == [{"model": "outer(elsewhere)"}]
