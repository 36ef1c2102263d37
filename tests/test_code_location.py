"""The code location as Dagster loads it: workspace.yaml, a real webserver, a launch through GraphQL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.ui

INSTANCE_YAML = """\
telemetry:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    """A real dagster-webserver on loopback serving workspace.yaml, with its own instance."""
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    log = open(home / "webserver.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    url = f"http://127.0.0.1:{port}"
    start = time.time()
    try:
        while True:
            try:
                if requests.get(f"{url}/server_info", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None or time.time() - start > 120:
                raise RuntimeError(f"webserver did not start: {(home / 'webserver.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield {"url": url, "port": port, "home": home, "ready_s": time.time() - start}
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _graphql(url: str, query: str, variables: dict | None = None) -> dict:
    response = requests.post(f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60)
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body
    return body["data"]


LAUNCH = """
mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
  __typename
  ... on LaunchRunSuccess { run { runId } }
  ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } }
} }"""

STATUS = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"


def _launch(url: str, job: str, run_config: dict) -> str:
    data = _graphql(url, LAUNCH, {"p": {"selector": {"repositoryLocationName": "graphbook", "repositoryName": "__repository__", "jobName": job}, "runConfigData": run_config}})
    result = data["launchRun"]
    assert result["__typename"] == "LaunchRunSuccess", result
    return result["run"]["runId"]


def _wait(url: str, run_id: str, timeout_s: float = 240) -> str:
    start = time.time()
    while time.time() - start < timeout_s:
        status = _graphql(url, STATUS, {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return status
        time.sleep(1)
    raise TimeoutError(f"run {run_id} still running after {timeout_s} s")


def test_workspace_lists_every_workflow_as_a_job(webserver):
    data = _graphql(webserver["url"], "{ workspaceOrError { ... on Workspace { locationEntries { name locationOrLoadError { __typename ... on RepositoryLocation { repositories { jobs { name } assetNodes { assetKey { path } } } } } } } } }")
    entry = data["workspaceOrError"]["locationEntries"][0]
    assert entry["name"] == "graphbook"
    repo = entry["locationOrLoadError"]["repositories"][0]
    jobs = {j["name"] for j in repo["jobs"]}
    assert {"sample", "sample_graph", "simple_functional", "simple_class", "word_split"} <= jobs
    keys = {"/".join(a["assetKey"]["path"]) for a in repo["assetNodes"]}
    assert {"sample/GenerateNumbers", "sample/Split/A", "sample/Split/B", "word_split/SplitWords/OutputFiles"} <= keys


def test_launch_from_graphql_with_edited_parameters_succeeds(webserver):
    """What the launchpad does: launchRun with edited step parameters (default multiprocess executor)."""
    import dagster as dg

    run_config = {"ops": {"sample__GenerateNumbers": {"config": {"amount": 12, "seed": 3}}, "sample__Transform": {"config": {"scale": 0.0, "shift": 20.0}}}}
    run_id = _launch(webserver["url"], "sample", run_config)
    assert _wait(webserver["url"], run_id) == "SUCCESS"
    instance = dg.DagsterInstance.from_config(str(webserver["home"]))
    counts = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = record.asset_materialization
        counts[m.asset_key.to_user_string()] = m.metadata["notes"].value
    assert counts["sample/GenerateNumbers"] == 12
    # scale 0, shift 20: every mean is 20 > 10, so Split sends all 12 notes to A
    assert counts["sample/Split/A"] == 12 and counts["sample/Split/B"] == 0


def test_reload_code_location(webserver):
    data = _graphql(webserver["url"], 'mutation { reloadRepositoryLocation(repositoryLocationName: "graphbook") { __typename ... on WorkspaceLocationEntry { locationOrLoadError { __typename } } } }')
    result = data["reloadRepositoryLocation"]
    assert result["__typename"] == "WorkspaceLocationEntry"
    assert result["locationOrLoadError"]["__typename"] == "RepositoryLocation"
