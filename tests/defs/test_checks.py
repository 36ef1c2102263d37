"""Asset checks declared on a workflow's steps, evaluated by real runs on a real instance."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, StepCheck, build_definitions, daily_partitions
from dagster_graphbook.model.workflow import WorkflowError
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

DAY = "2026-02-03"


@pytest.fixture
def checked(tmp_path: Path):
    """``make(score, checks)``: definitions of Items -> Score -> After, daily partitioned."""
    nodes = copy_nodes(tmp_path / "nodes", "chk.py", "checked_metrics")
    marker = tmp_path / "after.txt"
    wf = write_workflow(
        tmp_path,
        "checked",
        [
            step_node("1", "Items", {"n": 5}, source=True),
            step_node("2", "Score"),
            step_node("3", "After", {"marker": str(marker)}),
        ],
        [edge("1", "out", "2"), edge("2", "out", "3")],
    )

    def make(checks):
        spec = GraphbookWorkflow(
            wf, custom_nodes=[nodes], checks=checks, partitions_def=daily_partitions("2026-01-01")
        )
        return build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)

    return make, marker


def _run(defs: dg.Definitions, home: str, score: float) -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.from_config(home)
    config = {"ops": {"checked__Score": {"config": {"score": score}}}}
    return defs.resolve_job_def("checked").execute_in_process(
        run_config=config, instance=instance, partition_key=DAY, raise_on_error=False
    )


def _evaluations(result: dg.ExecuteInProcessResult) -> dict:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_blocking_check_passes_and_downstream_runs(checked, dagster_home):
    make, marker = checked
    check = StepCheck(step="Score", metric="accuracy", min=0.9, severity="blocking")
    result = _run(make([check]), dagster_home, 0.95)
    assert result.success
    evaluation = _evaluations(result)["accuracy_min_0_9"]
    assert evaluation.passed and evaluation.asset_key == dg.AssetKey(["checked", "Score"])
    assert evaluation.partition == DAY  # judged on the run's own day
    assert evaluation.metadata["value"].value == 0.95
    assert marker.read_text().split() == ["0", "1", "2", "3", "4"]


def test_blocking_check_failure_stops_downstream(checked, dagster_home):
    make, marker = checked
    result = _run(
        make([StepCheck(step="Score", metric="accuracy", min=0.9, severity="blocking")]),
        dagster_home,
        0.5,
    )
    assert not result.success
    evaluation = _evaluations(result)["accuracy_min_0_9"]
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert "workflow 'checked', step 'Score'" in evaluation.description
    assert "accuracy = 0.5, expected accuracy >= 0.9" in evaluation.description
    assert not marker.exists()  # After never ran

    def steps(kind):
        return {e.step_key for e in result.all_events if e.event_type == kind}

    skipped = steps(dg.DagsterEventType.STEP_SKIPPED)
    failed = steps(dg.DagsterEventType.STEP_FAILURE)
    assert failed == {"checked__Score"}
    assert "checked__After" not in steps(dg.DagsterEventType.STEP_START)
    assert skipped <= {"checked__After"}
    # the step's notes were still stored and materialized: the check judges them
    mats = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert "checked/Score" in mats


def test_blocking_check_failure_headline_is_ours(checked, dagster_home):
    """The failed step's headline names the workflow, step, check and value (not Dagster's
    generic "blocking asset check failed")."""
    make, _ = checked
    result = _run(
        make([StepCheck(step="Score", metric="accuracy", min=0.9, severity="blocking")]),
        dagster_home,
        0.5,
    )
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    data = failure.step_failure_data
    assert data.user_failure_data is not None, data.error.to_string()
    assert data.user_failure_data.description == (
        "workflow 'checked', step 'Score' (node 2): blocking check 'accuracy_min_0_9' failed: "
        "accuracy = 0.5, expected accuracy >= 0.9 (blocking)"
    )
    meta = {k: v.value for k, v in data.user_failure_data.metadata.items()}
    assert (meta["workflow"], meta["step"], meta["node"]) == ("checked", "Score", "2")


def test_warning_check_failure_lets_the_run_go_on(checked, dagster_home):
    make, marker = checked
    checks = [
        StepCheck(step="Score", metric="accuracy", min=0.9, severity="warn"),
        StepCheck(step="Items", metric="row_count", min=5, max=5),
    ]
    result = _run(make(checks), dagster_home, 0.5)
    assert result.success
    evaluations = _evaluations(result)
    warn = evaluations["accuracy_min_0_9"]
    assert not warn.passed and warn.severity == dg.AssetCheckSeverity.WARN
    rows = evaluations["row_count_min_5_max_5"]
    assert rows.passed and rows.metadata["value"].value == 5
    assert len(marker.read_text().split()) == 5


def test_check_without_severity_warns_as_dagster_checks_do(checked, dagster_home):
    """No severity: non-blocking, as Dagster's ``AssetCheckSpec`` (blocking=False unless asked).
    The failed check shows as a warning and the steps below still run."""
    make, marker = checked
    defs = make([StepCheck(step="Score", metric="accuracy", min=0.9)])
    (spec,) = (
        defs.resolve_asset_graph().get(dg.AssetKey(["checked", "Score"])).assets_def.check_specs
    )
    assert spec.blocking is False and spec.description == "accuracy >= 0.9 (warn)"
    result = _run(defs, dagster_home, 0.5)
    assert result.success
    evaluation = _evaluations(result)["accuracy_min_0_9"]
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert marker.read_text().split() == ["0", "1", "2", "3", "4"]  # After ran


def test_missing_figure_fails_the_check_naming_the_figures(checked, dagster_home):
    make, _ = checked
    result = _run(
        make([StepCheck(step="Score", metric="precision", min=0.5, severity="blocking")]),
        dagster_home,
        1.0,
    )
    evaluation = _evaluations(result)["precision_min_0_5"]
    assert not evaluation.passed and not result.success
    assert "reported no numeric 'precision'" in evaluation.description
    assert "accuracy" in evaluation.description


def test_check_on_unknown_step_or_pin_is_a_load_error(checked):
    make, _ = checked
    with pytest.raises(
        WorkflowError,
        match="names step 'Scor', which is not in workflow "
        "'checked' \\(steps: After, Items, Score\\)",
    ):
        make([StepCheck(step="Scor", metric="accuracy", min=0.9)])
    with pytest.raises(WorkflowError, match="names pin 'A' \\(its pins: out\\)"):
        make([StepCheck(step="Score", metric="accuracy", min=0.9, pin="A")])
    with pytest.raises(ValueError, match="give min, max or both"):
        StepCheck(step="Score", metric="accuracy")


def test_component_yaml_checks(tmp_path):
    """``checks:`` in defs.yaml: the demo's own component declares accuracy >= 0.9."""
    import importlib
    import warnings

    from dagster.components import load_defs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        defs = load_defs(importlib.import_module("definitions"))
    keys = defs.resolve_asset_graph().asset_check_keys
    key = dg.AssetCheckKey(dg.AssetKey(["nightly_shapes", "ClassifyShapes"]), "accuracy_min_0_9")
    assert key in keys
    spec = next(
        s
        for a in defs.assets
        if isinstance(a, dg.AssetsDefinition)
        for s in a.check_specs
        if s.key == key
    )
    assert not spec.blocking  # the demo warns (tests train its model briefly); blocking: see above


FULL_DAY, EMPTY_DAY = "2026-02-02", "2026-02-03"
SOURCE_CHECK_KEY = dg.AssetCheckKey(dg.AssetKey(["daily", "DayFiles"]), "source_has_notes")


@pytest.fixture
def daily(tmp_path: Path):
    """``(workflow, nodes, incoming)``: DayFiles(incoming/<day>) -> Sizes; only FULL_DAY's folder
    has files."""
    nodes = copy_nodes(tmp_path / "nodes", "day_nodes.py", "checked_days")
    incoming = tmp_path / "incoming"
    (incoming / FULL_DAY).mkdir(parents=True)
    for name in ("a.png", "b.png"):
        (incoming / FULL_DAY / name).write_bytes(b"")
    wf = write_workflow(
        tmp_path,
        "daily",
        [
            step_node("1", "DayFiles", {"folder": f"{incoming}/{{partition_key}}"}, source=True),
            step_node("2", "Sizes"),
        ],
        [edge("1", "out", "2")],
    )
    return wf, nodes, incoming


def _run_day(defs: dg.Definitions, home: str, day: str) -> dg.ExecuteInProcessResult:
    with dg.DagsterInstance.from_config(home) as instance:
        return defs.resolve_job_def("daily").execute_in_process(
            instance=instance, partition_key=day, raise_on_error=False
        )


def test_a_partition_whose_source_emits_no_notes_warns_naming_the_step_and_day(
    daily, tmp_path, dagster_home
):
    """The day's folder is missing: the run still succeeds (the default, ``warn``), but the
    source's asset shows a failed warning check for that day and the run's log a warning, both
    naming the step and the partition; a day with files passes the check."""
    wf, nodes, _ = daily
    defs = build_definitions(
        [
            GraphbookWorkflow(
                wf, custom_nodes=[nodes], partitions_def=daily_partitions("2026-01-01")
            )
        ],
        notes_dir=str(tmp_path / "notes"),
        strict=True,
    )
    spec = defs.resolve_assets_def(SOURCE_CHECK_KEY.asset_key).get_spec_for_check_key(
        SOURCE_CHECK_KEY
    )
    assert not spec.blocking
    empty = _run_day(defs, dagster_home, EMPTY_DAY)
    assert empty.success
    evaluation = _evaluations(empty)["source_has_notes"]
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.partition == EMPTY_DAY
    said = (
        f"workflow 'daily', step 'DayFiles' (node 1): the source emitted no notes for partition "
        f"{EMPTY_DAY}: is its input for that day missing or empty?"
    )
    assert evaluation.description.startswith(said)
    with dg.DagsterInstance.from_config(dagster_home) as instance:  # what the terminal prints
        logged = [
            e.user_message
            for e in instance.all_logs(empty.run_id)
            if e.dagster_event is None and e.level == logging.WARNING
        ]
    assert any(said in line for line in logged), logged
    full = _run_day(defs, dagster_home, FULL_DAY)
    assert full.success and _evaluations(full)["source_has_notes"].passed


def test_empty_source_blocking_in_the_yaml_component_fails_the_run(daily, tmp_path):
    """``empty_source: blocking`` in defs.yaml: the missing day fails the run at the source,
    naming the step and the day, and the steps below it do not run."""
    from tests.support.defs_folder import load_defs_folder

    wf, nodes, _ = daily
    yaml = f"""
        type: dagster_graphbook.GraphbookWorkflowComponent
        attributes:
          workflow: {wf}
          custom_nodes: [{nodes}]
          partitions: {{start_date: "2026-01-01"}}
          notes_dir: {tmp_path / "notes"}
          empty_source: blocking
    """
    (tmp_path / "project").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # load_defs, as the component tests
        defs = load_defs_folder(tmp_path / "project", "gb_empty_source_defs", {"daily": yaml})
    home = tmp_path / "home"
    home.mkdir()
    empty = _run_day(defs, str(home), EMPTY_DAY)
    assert not empty.success
    (failure,) = [e for e in empty.all_events if e.is_step_failure]
    assert failure.step_key == "daily__DayFiles"
    assert failure.step_failure_data.user_failure_data.description == (
        "workflow 'daily', step 'DayFiles' (node 1): blocking check 'source_has_notes' failed: "
        f"the source emitted no notes for partition {EMPTY_DAY}: is its input for that day "
        "missing or empty? (empty_source: blocking; ignore to let such runs pass)"
    )
    assert "daily__Sizes" not in {e.step_key for e in empty.all_events if e.is_step_start}
    assert _run_day(defs, str(home), FULL_DAY).success


def test_empty_source_ignore_and_unpartitioned_workflows_have_no_source_check(daily, tmp_path):
    wf, nodes, _ = daily
    partitions = daily_partitions("2026-01-01")
    for spec in (
        GraphbookWorkflow(
            wf, custom_nodes=[nodes], partitions_def=partitions, empty_source="ignore"
        ),
        GraphbookWorkflow(wf, custom_nodes=[nodes]),
    ):
        defs = build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)
        assert SOURCE_CHECK_KEY not in defs.resolve_asset_graph().asset_check_keys
