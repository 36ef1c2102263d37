"""By-hand benchmark: one day of nightly_shapes launched from the UI vs from the terminal.

    .venv/bin/python benchmarks/bench_ui_vs_cli.py [--runs 3] [--day 2025-06-01]
        [--ui-mode default|in_process|multiprocess ...]

Not a test. Starts a real ``dagster dev -w workspace.yaml`` (webserver + daemon, default
settings: queued run coordinator) on 127.0.0.1 with a temporary DAGSTER_HOME, from the
repository root, as the README's recipe does. Then, interleaved run by run:
  ui        GraphQL ``launchRun`` of the day (what the Launchpad sends: the job and the
            ``dagster/partition`` tag), timed from the request to the run's SUCCESS, polled
            every 0.1 s; ``--ui-mode`` adds ``execution`` run config (``default``: none);
  terminal  ``dagster-graphbook materialize nightly_shapes --partition DAY --no-progress``,
            timed as a whole process (start-up and imports included), same instance.
The demo's inputs are the ones ``scripts/demo.sh`` uses (data/incoming/DAY, models/shapes_cnn.pt,
made with its scripts when missing; outputs/DAY is written). One warm-up of each is not counted.
Prints the median, min and max of each, the UI/terminal ratio and the 1.5x target.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import requests

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
JOB = "nightly_shapes"
LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status startTime endTime
  creationTime } } }"""
MODES = {
    "default": {},
    "in_process": {"execution": {"config": {"in_process": {}}}},
    "multiprocess": {"execution": {"config": {"multiprocess": {}}}},
    # one process per step, forked from a server that imported these once
    "forkserver": {
        "execution": {
            "config": {
                "multiprocess": {
                    "start_method": {
                        "forkserver": {
                            "preload_modules": ["torch", "dagster_graphbook", "definitions"]
                        }
                    }
                }
            }
        }
    },
}


def _ensure_inputs(day: str) -> None:
    """The demo's day of images and its model, made by the demo's own scripts when missing."""
    scripts = REPO / "examples" / "nightly"
    if not (REPO / "data" / "incoming" / day).is_dir():
        subprocess.run(
            [
                sys.executable,
                str(scripts / "shapes_data.py"),
                "--root",
                str(REPO / "data" / "incoming"),
                "--date",
                day,
                "--days",
                "1",
            ],
            check=True,
            cwd=REPO,
        )
    if not (REPO / "models" / "shapes_cnn.pt").is_file():
        print("[bench] training the shapes CNN (models/shapes_cnn.pt)", flush=True)
        subprocess.run(
            [
                sys.executable,
                str(scripts / "train_shapes_cnn.py"),
                "--out",
                str(REPO / "models" / "shapes_cnn.pt"),
            ],
            check=True,
            cwd=REPO,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DagsterDev:
    """``dagster dev`` in its own process group (SIGINT reset: see dagster.md §4.4)."""

    def __init__(self, home: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(home / "dagster_dev.log", "w")
        env = {**os.environ, "DAGSTER_HOME": str(home)}
        self.proc = subprocess.Popen(
            [
                str(BIN / "dagster"),
                "dev",
                "-w",
                "workspace.yaml",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
            ],
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def graphql(self, query: str, variables: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        body = requests.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60
        ).json()
        if "errors" in body:
            raise RuntimeError(body["errors"])
        return body["data"]

    def wait_ready(self, timeout_s: float = 180) -> float:
        start = time.time()
        query = "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }"
        while time.time() - start < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited; see {self.log.name}")
            try:
                entries = self.graphql(query)["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    return time.time() - start
            except (requests.ConnectionError, RuntimeError, KeyError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"dagster dev not ready after {timeout_s} s; see {self.log.name}")

    def run(self, day: str, run_config: Dict[str, Any]) -> Dict[str, float]:
        """Launch as the Launchpad does; seconds to SUCCESS and the run's own queue/run times."""
        params = {
            "selector": {
                "repositoryLocationName": "graphbook",
                "repositoryName": "__repository__",
                "jobName": JOB,
            },
            "runConfigData": run_config,
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": day}]},
        }
        start = time.time()
        launched = self.graphql(LAUNCH, {"p": params})["launchRun"]
        if launched["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(launched)
        run_id = launched["run"]["runId"]
        while True:
            run = self.graphql(STATUS, {"id": run_id})["runOrError"]
            if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                break
            time.sleep(0.1)
        total = time.time() - start
        if run["status"] != "SUCCESS":
            raise RuntimeError(f"UI run {run_id} ended {run['status']}")
        return {
            "total": total,
            "queued": run["startTime"] - run["creationTime"],
            "running": run["endTime"] - run["startTime"],
        }

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def _terminal(day: str, home: Path) -> float:
    start = time.time()
    subprocess.run(
        [str(BIN / "dagster-graphbook"), "materialize", JOB, "--partition", day, "--no-progress"],
        check=True,
        cwd=REPO,
        capture_output=True,
        env={**os.environ, "DAGSTER_HOME": str(home)},
    )
    return time.time() - start


def _row(name: str, values: List[float]) -> str:
    return (
        f"| {name:<34} | {statistics.median(values):8.2f} | {min(values):6.2f} "
        f"| {max(values):6.2f} |"
    )


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="measured runs of each (median)")
    parser.add_argument("--day", default="2025-06-01", help="partition of nightly_shapes")
    parser.add_argument(
        "--ui-mode",
        action="append",
        choices=sorted(MODES),
        help="execution run config of the UI launch (repeatable; default: default)",
    )
    args = parser.parse_args(argv)
    modes = args.ui_mode or ["default"]
    _ensure_inputs(args.day)
    with tempfile.TemporaryDirectory(prefix="bench_ui_") as tmp:
        home = Path(tmp)
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        dev = DagsterDev(home)
        try:
            print(f"[bench] dagster dev ready after {dev.wait_ready():.1f} s", flush=True)
            ui: Dict[str, List[Dict[str, float]]] = {m: [] for m in modes}
            terminal: List[float] = []
            for i in range(args.runs + 1):  # the first round warms up and is not counted
                t = _terminal(args.day, home)
                r = {m: dev.run(args.day, MODES[m]) for m in modes}
                print(
                    f"[bench] round {i}{' (warm-up)' if i == 0 else ''}: terminal {t:.2f} s, "
                    + ", ".join(f"ui[{m}] {v['total']:.2f} s" for m, v in r.items()),
                    flush=True,
                )
                if i:
                    terminal.append(t)
                    for m, v in r.items():
                        ui[m].append(v)
        finally:
            dev.stop()
    load = os.getloadavg()[0]
    print(
        f"\nnightly_shapes {args.day}, {args.runs} runs each, load average {load:.1f}, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"| {'how':<34} | median s |  min s |  max s |")
    print(f"| {'-' * 34} | -------- | ------ | ------ |")
    print(_row("terminal (materialize)", terminal))
    for m in modes:
        print(_row(f"UI launchRun [{m}]", [v["total"] for v in ui[m]]))
        print(_row(f"  launch to start [{m}]", [v["queued"] for v in ui[m]]))
        print(_row(f"  start to end [{m}]", [v["running"] for v in ui[m]]))
    base = statistics.median(terminal)
    for m in modes:
        ratio = statistics.median(v["total"] for v in ui[m]) / base
        verdict = "PASS" if ratio <= 1.5 else "MISS"
        print(f"UI [{m}] / terminal: {ratio:.2f}x (target <= 1.5x: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
