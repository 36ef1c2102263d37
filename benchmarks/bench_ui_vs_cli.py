"""By-hand benchmark: one day of nightly_shapes launched from the UI vs from the terminal.

    .venv/bin/python benchmarks/bench_ui_vs_cli.py [--runs 3] [--day 2025-06-01]
        [--ui-mode default|in_process|multiprocess|forkserver ...] [--stock-instance] [--goal 1.3]

Not a test. Starts a real ``dagster dev -w workspace.yaml`` (webserver + daemon: the queued run
coordinator) on 127.0.0.1 with a temporary DAGSTER_HOME, from the repository root, as the
README's recipe does. Then, interleaved run by run:
  ui        GraphQL ``launchRun`` of the day (what the Launchpad sends: the job and the
            ``dagster/partition`` tag), timed from the request to the run's SUCCESS, polled
            every 0.1 s; ``--ui-mode`` adds ``execution`` run config (``default``: none);
  terminal  ``dagster-graphbook materialize nightly_shapes --partition DAY --no-progress``,
            timed as a whole process (start-up and imports included), same instance.
The demo's inputs are the ones ``scripts/demo.sh`` uses (data/incoming/DAY, models/shapes_cnn.pt,
made with its scripts when missing; outputs/DAY is written). One warm-up of each is not counted.
The instance is the one the project writes (``default_dagster_home``: the dagster.yaml that
``dagster-graphbook`` and ``scripts/demo.sh`` write, its run queue settings included);
``--stock-instance`` uses Dagster's defaults instead (telemetry off only), to compare.
Prints the median, min and max of each, where each run spent its time (the phases between its
own events' timestamps, the bench's clock at launch and when it saw the end: medians), the
UI/terminal ratio and the 1.3x goal of issue 25 (PASS/MISS).
"""

from __future__ import annotations

import argparse
import os
import random
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


# Phases of a run, between the bench's clock (launch, done) and the run's own events; a mark the
# run lacks is skipped (Dagster 1.13 writes no RUN_DEQUEUED: RUN_ENQUEUED -> RUN_STARTING is the
# wait for the daemon's next look at the queue plus its launch of the run worker).
UI_MARKS = [
    "launch",
    "RUN_ENQUEUED",
    "RUN_DEQUEUED",
    "RUN_STARTING",
    "RUN_START",
    "first STEP_START",
    "last STEP_SUCCESS",
    "RUN_SUCCESS",
    "seen done",
]
TERMINAL_MARKS = [
    "launch",
    "run created",
    "RUN_START",
    "first STEP_START",
    "last STEP_SUCCESS",
    "RUN_SUCCESS",
    "seen done",
]


def _marks(home: Path, run_id: str, launch: float, done: float) -> Dict[str, float]:
    """Wall-clock time of each mark of the run (its events' timestamps; first/last step)."""
    import dagster as dg  # after the timed part: the bench's own process

    instance = dg.DagsterInstance.from_config(str(home))
    marks: Dict[str, float] = {"launch": launch, "seen done": done}
    record = instance.get_run_record_by_id(run_id)
    if record is not None:
        marks["run created"] = record.create_timestamp.timestamp()
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        kind = event.event_type.name  # its value is the legacy name (PIPELINE_START)
        if kind == "STEP_START":
            marks.setdefault("first STEP_START", entry.timestamp)
        elif kind == "STEP_SUCCESS":
            marks["last STEP_SUCCESS"] = entry.timestamp
        elif kind.startswith("RUN_"):
            marks.setdefault(kind, entry.timestamp)
    return marks


def _phases(marks: Dict[str, float], order: List[str]) -> Dict[str, float]:
    """Seconds between consecutive marks present (``A -> B``)."""
    present = [m for m in order if m in marks]
    return {f"{a} -> {b}": marks[b] - marks[a] for a, b in zip(present, present[1:])}


def _latest_run_id(home: Path) -> str:
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(home))
    return instance.get_run_records(limit=1)[0].dagster_run.run_id


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DagsterDev:
    """``dagster dev`` in its own process group (SIGINT reset: see dagster.md §4.4)."""

    def __init__(self, home: Path):
        self.home = home
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
        done = time.time()
        if run["status"] != "SUCCESS":
            raise RuntimeError(f"UI run {run_id} ended {run['status']}")
        return {
            "total": done - start,
            **_phases(_marks(self.home, run_id, start, done), UI_MARKS),
        }

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def _terminal(day: str, home: Path) -> Dict[str, float]:
    """The whole ``dagster-graphbook materialize`` process, and the phases of its run."""
    start = time.time()
    subprocess.run(
        [str(BIN / "dagster-graphbook"), "materialize", JOB, "--partition", day, "--no-progress"],
        check=True,
        cwd=REPO,
        capture_output=True,
        env={**os.environ, "DAGSTER_HOME": str(home)},
    )
    done = time.time()
    marks = _marks(home, _latest_run_id(home), start, done)
    return {"total": done - start, **_phases(marks, TERMINAL_MARKS)}


def _row(name: str, values: List[float]) -> str:
    return (
        f"| {name:<44} | {statistics.median(values):8.2f} | {min(values):6.2f} "
        f"| {max(values):6.2f} |"
    )


def _print_phases(name: str, runs: List[Dict[str, float]]) -> None:
    print(f"\n{name}: where the time goes (s)")
    keys: List[str] = []
    for run in runs:
        keys += [k for k in run if k != "total" and k not in keys]
    print(f"  {'phase':<40} median    min    max")
    for key in [*keys, "total"]:
        values = [r[key] for r in runs if key in r]
        print(f"  {key:<40} {statistics.median(values):6.2f} {min(values):6.2f} {max(values):6.2f}")


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
    parser.add_argument("--goal", type=float, default=1.3, help="UI / terminal goal (issue 25)")
    parser.add_argument(
        "--jitter",
        type=float,
        default=5.5,
        help="untimed random pause (0 to this many s) before each UI launch (Dagster's default "
        "queue look: every 5 s, in 0.5 s steps)",
    )
    parser.add_argument(
        "--stock-instance",
        action="store_true",
        help="Dagster's instance defaults (telemetry off only), not the dagster.yaml we ship",
    )
    args = parser.parse_args(argv)
    modes = args.ui_mode or ["default"]
    _ensure_inputs(args.day)
    with tempfile.TemporaryDirectory(prefix="bench_ui_") as tmp:
        home = Path(tmp)
        if args.stock_instance:
            (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        else:
            sys.path.insert(0, str(REPO))
            from dagster_graphbook.defs.instance import default_dagster_home

            default_dagster_home(str(home))  # the dagster.yaml the project writes
        print(f"[bench] instance {home}/dagster.yaml:", flush=True)
        print((home / "dagster.yaml").read_text(), flush=True)
        dev = DagsterDev(home)
        try:
            print(f"[bench] dagster dev ready after {dev.wait_ready():.1f} s", flush=True)
            ui: Dict[str, List[Dict[str, float]]] = {m: [] for m in modes}
            terminal: List[Dict[str, float]] = []
            rng = random.Random(25)
            for i in range(args.runs + 1):  # the first round warms up and is not counted
                t = _terminal(args.day, home)
                r = {}
                for m in modes:
                    # launched at a random moment of the daemon's loop, as a user does: rounds
                    # of a steady length would otherwise meet its queue look at the same phase
                    time.sleep(rng.uniform(0, args.jitter))
                    r[m] = dev.run(args.day, MODES[m])
                print(
                    f"[bench] round {i}{' (warm-up)' if i == 0 else ''}: "
                    f"terminal {t['total']:.2f} s, "
                    + ", ".join(f"ui[{m}] {v['total']:.2f} s" for m, v in r.items())
                    + f", load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
                if i:
                    terminal.append(t)
                    for m, v in r.items():
                        ui[m].append(v)
        finally:
            dev.stop()
    load = os.getloadavg()
    instance = "Dagster's defaults" if args.stock_instance else "the shipped dagster.yaml"
    print(
        f"\nnightly_shapes {args.day}, {args.runs} runs each, instance: {instance}, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs"
    )
    print(f"| {'how':<44} | median s |  min s |  max s |")
    print(f"| {'-' * 44} | -------- | ------ | ------ |")
    print(_row("terminal (materialize, whole process)", [v["total"] for v in terminal]))
    for m in modes:
        print(_row(f"UI launchRun [{m}] (to SUCCESS seen)", [v["total"] for v in ui[m]]))
    _print_phases("terminal", terminal)
    for m in modes:
        _print_phases(f"UI launchRun [{m}]", ui[m])
    base = statistics.median(v["total"] for v in terminal)
    print()
    for m in modes:
        ratio = statistics.median(v["total"] for v in ui[m]) / base
        verdict = "PASS" if ratio <= args.goal else "MISS"
        print(f"UI [{m}] / terminal: {ratio:.2f}x (goal <= {args.goal}x: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
