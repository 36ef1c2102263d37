"""The code location as Dagster loads it: workspace.yaml, a real webserver, launches through GraphQL."""

from __future__ import annotations

import dagster as dg
import pytest

pytestmark = pytest.mark.ui


def _materializations(home, run_id: str) -> dict:
    """``{asset key: notes count}`` for every asset the run materialized, read from the instance's event log."""
    instance = dg.DagsterInstance.from_config(str(home))
    counts = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = record.asset_materialization
        counts[m.asset_key.to_user_string()] = m.metadata["notes"].value
    return counts


def test_webserver_serves_server_info(webserver):
    print(f"webserver ready (GET /server_info) {webserver.ready_s:.1f} s after start")
    import requests

    info = requests.get(f"{webserver.url}/server_info", timeout=10).json()
    assert info["dagster_webserver_version"] == dg.__version__


def test_workspace_lists_every_workflow_as_a_job(webserver):
    data = webserver.graphql("{ workspaceOrError { ... on Workspace { locationEntries { name locationOrLoadError { __typename ... on RepositoryLocation { repositories { jobs { name } assetNodes { assetKey { path } } } } } } } } }")
    entry = data["workspaceOrError"]["locationEntries"][0]
    assert entry["name"] == "graphbook"
    repo = entry["locationOrLoadError"]["repositories"][0]
    jobs = {j["name"] for j in repo["jobs"]}
    assert {"sample", "sample_graph", "simple_functional", "simple_class", "word_split"} <= jobs
    keys = {"/".join(a["assetKey"]["path"]) for a in repo["assetNodes"]}
    assert {"sample/GenerateNumbers", "sample/Split/A", "sample/Split/B", "word_split/SplitWords/OutputFiles"} <= keys


def test_launch_from_graphql_with_edited_parameters_succeeds(webserver):
    """What the launchpad does: launchRun with edited step parameters (default multiprocess executor)."""
    run_config = {"ops": {"sample__GenerateNumbers": {"config": {"amount": 12, "seed": 3}}, "sample__Transform": {"config": {"scale": 0.0, "shift": 20.0}}}}
    run_id = webserver.launch("sample", run_config)
    webserver.expect_success(run_id)
    counts = _materializations(webserver.home, run_id)
    assert counts["sample/GenerateNumbers"] == 12
    # scale 0, shift 20: every mean is 20 > 10, so Split sends all 12 notes to A
    assert counts["sample/Split/A"] == 12 and counts["sample/Split/B"] == 0


def test_rematerialize_one_downstream_asset_from_stored_parents(webserver):
    """The UI's "Materialize selected" on one step: only that op runs, reading its parents' stored notes."""
    upstream = {"ops": {"sample__GenerateNumbers": {"config": {"amount": 7, "seed": 5}}, "sample__Transform": {"config": {"scale": 0.0, "shift": 20.0}}}}
    first = webserver.launch("sample", upstream)
    webserver.expect_success(first)
    assert _materializations(webserver.home, first)["sample/Split/A"] == 7

    # Split alone, with the job's default config: had its parents been re-run with their defaults
    # (amount 200, scale 2, shift 1: means spread over 1..21), Split would see 200 notes, some below 10.
    split_keys = [{"path": ["sample", "Split", "A"]}, {"path": ["sample", "Split", "B"]}]
    second = webserver.launch("sample", {}, assetSelection=split_keys)
    webserver.expect_success(second)

    run = webserver.graphql("query($id: ID!) { runOrError(runId: $id) { ... on Run { stepKeysToExecute stepStats { stepKey status } } } }", {"id": second})["runOrError"]
    assert run["stepKeysToExecute"] == ["sample__Split"]
    assert [(s["stepKey"], s["status"]) for s in run["stepStats"]] == [("sample__Split", "SUCCESS")]
    assert _materializations(webserver.home, second) == {"sample/Split/A": 7, "sample/Split/B": 0}

    # the parents' latest materializations are still those of the first run
    instance = dg.DagsterInstance.from_config(str(webserver.home))
    for key in (["sample", "CalcMean"], ["sample", "Transform"], ["sample", "GenerateNumbers"]):
        assert instance.get_latest_materialization_event(dg.AssetKey(key)).run_id == first


def test_reload_code_location(webserver):
    data = webserver.graphql('mutation { reloadRepositoryLocation(repositoryLocationName: "graphbook") { __typename ... on WorkspaceLocationEntry { locationOrLoadError { __typename } } } }')
    result = data["reloadRepositoryLocation"]
    assert result["__typename"] == "WorkspaceLocationEntry"
    assert result["locationOrLoadError"]["__typename"] == "RepositoryLocation"
