"""A real dagster-webserver on loopback (dagster.md §4.4), started from the checkout under test,
and the GraphQL calls the UI makes (launch a run, wait for it)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from tests.support.network import free_port
from tests.support.paths import REPO

WEBSERVER_INSTANCE_YAML = """\
telemetry:
  enabled: false
run_coordinator:              # no daemon in tests: launched runs start at once instead of queueing
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""


class Webserver:
    """A running webserver: its URL, its instance folder, and the GraphQL calls the UI makes."""

    def __init__(self, url: str, home: Path, ready_s: float):
        self.url, self.home, self.ready_s = url, home, ready_s

    def graphql(self, query: str, variables: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        import requests

        response = requests.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60
        )
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body
        return body["data"]

    def launch(
        self,
        job: str,
        run_config: Dict[str, Any],
        *,
        tags: Optional[Dict[str, str]] = None,
        **selector: Any,
    ) -> str:
        """``launchRun`` as the launchpad sends it; ``selector`` adds e.g. ``assetSelection``,
        ``tags`` become run tags."""
        params: Dict[str, Any] = {
            "selector": {
                "repositoryLocationName": "graphbook",
                "repositoryName": "__repository__",
                "jobName": job,
                **selector,
            },
            "runConfigData": run_config,
        }
        if tags:
            params["executionMetadata"] = {
                "tags": [{"key": k, "value": v} for k, v in tags.items()]
            }
        data = self.graphql(LAUNCH_RUN, {"p": params})["launchRun"]
        assert data["__typename"] == "LaunchRunSuccess", data
        return data["run"]["runId"]

    def wait(self, run_id: str, timeout_s: float = 240) -> str:
        """Poll until the run finishes and return its status."""
        import time

        start = time.time()
        while time.time() - start < timeout_s:
            status = self.graphql(RUN_STATUS, {"id": run_id})["runOrError"]["status"]
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                return status
            time.sleep(0.25)  # a launched run of the sample ends in seconds
        raise TimeoutError(f"run {run_id} still running after {timeout_s} s")

    def expect_success(self, run_id: str, timeout_s: float = 240) -> None:
        """Wait for the run; if it did not succeed, fail with the errors of its event log."""
        status = self.wait(run_id, timeout_s)
        if status != "SUCCESS":
            events = self.graphql(RUN_ERRORS, {"id": run_id})["logsForRun"].get("events", [])
            errors = [
                f"{e.get('stepKey')}: {e['message']} {(e.get('error') or {}).get('message', '')}"
                for e in events
                if e.get("level") == "ERROR"
            ]
            raise AssertionError(f"run {run_id} ended {status}:\n" + "\n".join(errors))


LAUNCH_RUN = """
mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
  __typename
  ... on LaunchRunSuccess { run { runId } }
  ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } }
  ... on InvalidSubsetError { message }
} }"""

RUN_STATUS = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"

RUN_ERRORS = """
query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
  ... on MessageEvent { message level stepKey }
  ... on ExecutionStepFailureEvent { error { message } }
  ... on RunFailureEvent { error { message } }
} } } }"""


@contextlib.contextmanager
def serve_webserver(
    workspace: Path,
    home: Path,
    instance_yaml: Optional[str] = WEBSERVER_INSTANCE_YAML,
    env: Optional[Dict[str, str]] = None,
) -> Iterator[Webserver]:
    """``dagster-webserver -w WORKSPACE`` (run from the repository root) with its instance in
    ``home``, on a free loopback port; stopped on exit. ``instance_yaml`` is written as the
    instance's ``dagster.yaml`` (None: keep the one there); ``env`` adds to its environment."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import requests

    if instance_yaml is not None:
        (home / "dagster.yaml").write_text(instance_yaml)
    port = free_port()
    log_path = home / "webserver.log"
    # the checkout first: the code servers run in their location's working directory, where an
    # editable install made from another checkout (a git worktree sharing its venv) would
    # otherwise give the location and its runs that checkout's package, not the one under test
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    with open(log_path, "w") as log:
        # start_new_session + SIGINT reset: the whole group can be stopped with SIGINT even when
        # pytest
        # itself was started with SIGINT ignored (dagster.md §4.4).
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster_webserver",
                "-w",
                str(workspace),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            cwd=REPO,
            env={**os.environ, **(env or {}), "DAGSTER_HOME": str(home), "PYTHONPATH": pythonpath},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
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
                raise RuntimeError(
                    f"dagster-webserver did not start within 120 s:\n{log_path.read_text()[-3000:]}"
                )
            time.sleep(0.25)
        yield Webserver(url, home, time.time() - start)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
