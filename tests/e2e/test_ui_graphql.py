"""What the UI reads, through a real dagster-webserver's GraphQL: asset checks, code versions and
"Unsynced", progress lines in a run's log, a broken workflow beside working ones, and the steps of a
run that picked ``multiprocess`` forked from the preloaded forkserver.

The location (tests/e2e/ui_cases.py) is written to a temporary folder that the tests edit like a
user would (a parameter in the workflow file, a step's source) before reloading it as the UI's
*Reload* button does.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from dagster_graphbook.defs.executor import MULTIPROCESS
from dagster_graphbook.execution.pools.workers import pid_running
from tests.e2e.ui_cases import BROKEN_STEP, LOCATION, checked_config, make_ui_project, set_param
from tests.support.webserver import serve_webserver

pytestmark = pytest.mark.ui

# the short form of execution/batch/progress.py, as the event log must show it
PROGRESS = re.compile(r"^(\d+)/12 \((\d+)%\) · [\d.]+ items/s · ETA (\d+ s|\?) · \d+ failed")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_ui_project(tmp_path_factory.mktemp("ui_cases")).parent


@pytest.fixture(scope="module")
def server(project, tmp_path_factory):
    home = tmp_path_factory.mktemp("dagster_home")
    with serve_webserver(project / "workspace.yaml", home) as webserver:
        yield webserver


def _launch(server, job: str, config: Dict[str, Any]) -> str:
    return server.launch(job, config, repositoryLocationName=LOCATION)


@pytest.fixture(scope="module")
def low_score_run(server) -> str:
    """``checked`` launched with accuracy 0.5 (its blocking check on Score fails), finished."""
    run_id = _launch(server, "checked", checked_config(score=0.5))
    server.wait(run_id)
    return run_id


@pytest.fixture(scope="module")
def versioned_run(server) -> str:
    run_id = _launch(server, "versioned", {})
    server.expect_success(run_id)
    return run_id


def _reload(server) -> None:
    query = """mutation($l: String!) { reloadRepositoryLocation(repositoryLocationName: $l) {
      __typename ... on WorkspaceLocationEntry { locationOrLoadError { __typename
        ... on PythonError { message } } } } }"""
    entry = server.graphql(query, {"l": LOCATION})["reloadRepositoryLocation"]
    assert entry["locationOrLoadError"]["__typename"] == "RepositoryLocation", entry


# ---------------------------------------------------------------------------------------------
# (d) a broken workflow file


def test_broken_workflow_shows_as_a_job_with_its_error_and_the_others_launch(server, versioned_run):
    query = """query($r: RepositorySelector!) { repositoryOrError(repositorySelector: $r) {
      __typename ... on Repository { jobs { name description } } } }"""
    repo = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__"}
    data = server.graphql(query, {"r": repo})["repositoryOrError"]
    assert data["__typename"] == "Repository", data
    jobs = {j["name"]: j["description"] or "" for j in data["jobs"]}
    assert {"checked", "versioned", "broken"} <= set(jobs)
    assert jobs["broken"].startswith("FAILED TO LOAD: "), jobs["broken"]
    assert "broken.json" in jobs["broken"] and BROKEN_STEP in jobs["broken"], jobs["broken"]
    for name in ("checked", "versioned"):
        assert not jobs[name].startswith("FAILED TO LOAD"), jobs[name]
    # the valid workflow beside it launched (fixture) and materialized both its steps
    query = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status
      stepStats { stepKey status } } } }"""
    run = server.graphql(query, {"id": versioned_run})["runOrError"]
    assert run["status"] == "SUCCESS"
    assert {(s["stepKey"], s["status"]) for s in run["stepStats"]} == {
        ("versioned__Items", "SUCCESS"),
        ("versioned__Tally", "SUCCESS"),
    }


def test_launching_the_broken_job_fails_with_its_load_error(server):
    run_id = _launch(server, "broken", {})
    assert server.wait(run_id) == "FAILURE"
    query = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
      __typename ... on ExecutionStepFailureEvent { stepKey error { message } } } } } }"""
    events = server.graphql(query, {"id": run_id})["logsForRun"]["events"]
    failures = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert failures, events
    assert "failed to load" in failures[0]["error"]["message"]
    assert BROKEN_STEP in failures[0]["error"]["message"]


# ---------------------------------------------------------------------------------------------
# (a) asset checks

CHECKS = """query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode {
  assetChecksOrError { __typename ... on AssetChecks { checks { name blocking description
    executionForLatestMaterialization { runId status
      evaluation { success severity description } } } } } } } }"""


def _checks(server, *key: str) -> Dict[str, Dict[str, Any]]:
    node = server.graphql(CHECKS, {"k": {"path": list(key)}})["assetNodeOrError"]
    checks = node["assetChecksOrError"]
    assert checks["__typename"] == "AssetChecks", checks
    return {c["name"]: c for c in checks["checks"]}


def test_check_evaluations_show_on_the_assets(server, low_score_run):
    blocking = _checks(server, "checked", "Score")["accuracy_min_0_9"]
    assert blocking["blocking"] is True
    assert blocking["description"] == "accuracy >= 0.9 (blocking)"
    execution = blocking["executionForLatestMaterialization"]
    assert execution["runId"] == low_score_run
    assert execution["status"] == "FAILED"
    evaluation = execution["evaluation"]
    assert evaluation["success"] is False and evaluation["severity"] == "ERROR"
    assert "accuracy = 0.5, expected accuracy >= 0.9" in evaluation["description"]

    warning = _checks(server, "checked", "Items")["row_count_min_1"]
    assert warning["blocking"] is False
    execution = warning["executionForLatestMaterialization"]
    assert execution["runId"] == low_score_run and execution["status"] == "SUCCEEDED"
    assert execution["evaluation"]["severity"] == "WARN"
    assert "row_count = 12" in execution["evaluation"]["description"]


def test_blocking_check_failure_skips_the_steps_downstream(server, project, low_score_run):
    query = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status
      stepStats { stepKey status } } } }"""
    run = server.graphql(query, {"id": low_score_run})["runOrError"]
    assert run["status"] == "FAILURE"
    steps = {s["stepKey"]: s["status"] for s in run["stepStats"]}
    assert steps["checked__Items"] == steps["checked__Slow"] == "SUCCESS"
    assert steps["checked__Score"] == "FAILURE"
    assert steps.get("checked__After", "SKIPPED") == "SKIPPED", steps
    assert not (project / "after.txt").exists()  # After never ran
    # Score's notes were stored and materialized: the check judged them
    query = """query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode {
      assetMaterializations(limit: 1) { runId } } } }"""
    for key, runs in ((["checked", "Score"], [low_score_run]), (["checked", "After"], [])):
        node = server.graphql(query, {"k": {"path": key}})["assetNodeOrError"]
        assert [m["runId"] for m in node["assetMaterializations"]] == runs, key


# ---------------------------------------------------------------------------------------------
# (c) progress lines


def test_progress_lines_in_the_run_event_log(server, low_score_run):
    query = """query($id: ID!) { logsForRun(runId: $id, limit: 1000) { ... on EventConnection {
      events { __typename ... on MessageEvent { message stepKey } } } } }"""
    events = server.graphql(query, {"id": low_score_run})["logsForRun"]["events"]
    lines = [e["message"] for e in events if e.get("message") and PROGRESS.match(e["message"])]
    assert lines, [e.get("message") for e in events]
    assert {e["stepKey"] for e in events if e.get("message") in lines} == {"checked__Slow"}
    # short: no workflow, step or node repeated beside the op name
    assert all(len(line) < 120 and "checked" not in line for line in lines), lines
    done = [int(PROGRESS.match(line).group(1)) for line in lines]
    percent = [int(PROGRESS.match(line).group(2)) for line in lines]
    assert done == sorted(done) and all(p == 100 * d // 12 for d, p in zip(done, percent))


# ---------------------------------------------------------------------------------------------
# (b) code versions and "Unsynced"

NODES = """{ assetNodes(loadMaterializations: true) { assetKey { path } opVersion
  staleStatus staleCauses { category reason } } }"""


def _nodes(server) -> Dict[str, Dict[str, Any]]:
    nodes = server.graphql(NODES)["assetNodes"]
    return {"/".join(n["assetKey"]["path"]): n for n in nodes}


def test_code_versions_change_on_edits_and_the_asset_shows_unsynced(server, project, versioned_run):
    before = _nodes(server)
    ours = {k: n for k, n in before.items() if k.split("/")[0] in ("checked", "versioned")}
    assert len(ours) == 6 and all(n["opVersion"] for n in ours.values()), ours
    assert before["versioned/Tally"]["staleStatus"] == "FRESH"

    # a parameter edited in the workflow file: only that step's version changes
    set_param(project / "versioned.json", "2", "scale", 3)
    _reload(server)
    after_param = _nodes(server)
    changed = {k for k in ours if after_param[k]["opVersion"] != before[k]["opVersion"]}
    assert changed == {"versioned/Tally"}
    tally = after_param["versioned/Tally"]
    assert tally["staleStatus"] == "STALE", tally
    assert {c["category"] for c in tally["staleCauses"]} == {"CODE"}, tally
    assert after_param["versioned/Items"]["staleStatus"] == "FRESH"

    # the step's source edited: its version changes again
    source = project / "nodes_edit" / "edit_nodes.py"
    source.write_text(source.read_text().replace("* ctx.scale", "* ctx.scale + 1"))
    _reload(server)
    after_source = _nodes(server)
    changed = {k for k in ours if after_source[k]["opVersion"] != after_param[k]["opVersion"]}
    assert changed == {"versioned/Tally"}
    assert after_source["versioned/Tally"]["staleStatus"] == "STALE"


# ---------------------------------------------------------------------------------------------
# (e) multiprocess picked in the launchpad


def test_multiprocess_from_the_launchpad_forks_the_steps_from_the_preloaded_forkserver(
    server, project
):
    # as typed in the launchpad: no start_method, which Dagster alone would take as spawn
    run_id = _launch(server, "forked", {"execution": {"config": {"multiprocess": {}}}})
    server.expect_success(run_id)
    record = json.loads((project / "forked_process.json").read_text())
    run_pid, parent = record["run_pid"], record["parent"]
    # a process of its own, started for the run's process...
    assert run_pid is not None and record["pid"] != run_pid, record
    # ...but not its child (spawn): forked by the run's forkserver, which preloaded the package
    # and torch
    assert parent["pid"] != run_pid and parent["ppid"] == run_pid, record
    assert "from multiprocessing.forkserver import main" in parent["cmdline"], record
    preload = MULTIPROCESS["multiprocess"]["start_method"]["forkserver"]["preload_modules"]
    assert repr(preload)[1:-1] in parent["cmdline"], record  # main(r, w, [...preload], ...)
    # the server ends with the run: nothing of it left running
    deadline = time.time() + 30
    while pid_running(parent["pid"]) and time.time() < deadline:
        time.sleep(0.2)
    assert not pid_running(parent["pid"]), f"forkserver {parent['pid']} outlived run {run_id}"
