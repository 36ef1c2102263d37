"""Every documented way to start a run of the demo job (``nightly_shapes``, a model resource node)
ends as a cron job or CI needs: exit status 0 and no traceback exactly when the run succeeded,
non-zero when it failed.

Each test lays out the repository's code location (``pyproject.toml``, ``definitions/``,
``workflows/``, ``custom_nodes/``, ``workspace.yaml``) in a folder of its own with the demo's
``data/incoming/<day>/`` and ``models/shapes_cnn.pt`` (made once per session by the demo's
scripts: ``nightly_inputs``), and runs the commands of the README and the docs there as a user
does, real subprocesses on a real instance. Dagster's ``execute_job`` builds the job's resources
again after the run when its result is opened (``dg launch`` and ``dagster job execute`` do):
that must neither fail nor misreport a finished run.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

import dagster as dg
import pytest

from tests.support.nightly import NIGHTLY_DAY
from tests.support.paths import REPO

JOB = "nightly_shapes"
DAY = NIGHTLY_DAY  # the day nightly_inputs generated
BIN = Path(sys.executable).parent
PROJECT_FILES = (
    "pyproject.toml",
    "definitions_location.py",
    "workspace.yaml",
    "definitions",
    "workflows",
    "custom_nodes",
)
NOT_DEAD = "was marked failed before this step could start"  # the wrong verdict on a finished run


@dataclass
class Demo:
    root: Path  # the repository's code location, with the demo's data/ and models/
    home: Path  # DAGSTER_HOME
    checkpoint: Path  # the trained model the demo's ShapesModel resource loads
    incoming: Path  # the generated days (data/incoming links to it)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """A console script of this environment, from the project root, as a user runs it."""
        env = {
            **os.environ,
            "DAGSTER_HOME": str(self.home),
            "VIRTUAL_ENV": sys.prefix,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        return subprocess.run(
            [str(BIN / args[0]), *args[1:]],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def model_gone(self) -> None:
        (self.root / "models" / "shapes_cnn.pt").unlink()

    def model_back(self) -> None:
        (self.root / "models" / "shapes_cnn.pt").symlink_to(self.checkpoint)


@pytest.fixture
def demo(tmp_path: Path, nightly_inputs: Dict[str, Any]) -> Demo:
    root = tmp_path / "repo"
    root.mkdir()
    for name in PROJECT_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / name)
    (root / "data").mkdir()
    (root / "data" / "incoming").symlink_to(nightly_inputs["incoming"])
    (root / "models").mkdir()
    home = tmp_path / "dagster_home"
    home.mkdir()
    # the daemon's and the UI's launches go straight to the run launcher (no queue daemon here)
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\n"
        "run_coordinator:\n  module: dagster._core.run_coordinator\n"
        "  class: DefaultRunCoordinator\n"
    )
    made = Demo(root, home, nightly_inputs["checkpoint"], nightly_inputs["incoming"])
    made.model_back()
    return made


def _text(out: subprocess.CompletedProcess) -> str:
    return f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"[-6000:]


def _run_id(out: subprocess.CompletedProcess) -> str:
    """The run id that ``dagster-graphbook`` prints when a run starts."""
    found = re.search(r"\brun ([0-9a-f]{8}-[0-9a-f-]{27})\b", out.stdout + out.stderr)
    assert found, _text(out)
    return found.group(1)


def _succeeded(
    demo: Demo, out: subprocess.CompletedProcess, run_id: Optional[str] = None
) -> dg.DagsterRun:
    """Exit 0, no traceback, and the run (``run_id``, else the latest) a success in the instance
    with nothing failing after its RUN_SUCCESS."""
    assert out.returncode == 0, _text(out)
    assert "Traceback" not in out.stdout + out.stderr, _text(out)
    with dg.DagsterInstance.from_config(str(demo.home)) as instance:
        run = instance.get_run_by_id(run_id) if run_id else instance.get_runs(limit=1)[0]
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS, run
        assert instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS)
        failed = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RESOURCE_INIT_FAILURE)
        assert failed == [], [r.message for r in failed]
    return run


def _failed(demo: Demo, out: subprocess.CompletedProcess, run_id: str) -> None:
    assert out.returncode != 0, _text(out)
    assert NOT_DEAD not in out.stdout + out.stderr, _text(out)
    with dg.DagsterInstance.from_config(str(demo.home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.FAILURE, run


def test_dg_launch_of_a_partition_exits_0_without_a_traceback(demo):
    out = demo.cli("dg", "launch", "--job", JOB, "--partition", DAY)
    run = _succeeded(demo, out)
    assert run.tags["dagster/partition"] == DAY


def test_dagster_job_execute_exits_0_without_a_traceback(demo):
    out = demo.cli(
        "dagster",
        "job",
        "execute",
        "-m",
        "definitions_location",
        "-j",
        JOB,
        "--tags",
        json.dumps({"dagster/partition": DAY}),
    )
    _succeeded(demo, out)


def test_materialize_and_materialize_from_failure_after_a_fix_exit_0(demo):
    """``scripts/demo.sh``'s command, then the fix-and-resume loop of docs/reliability.md: the
    model is missing (the run fails, exit 1, saying so), put back, and the run resumed."""
    done = demo.cli("dagster-graphbook", "materialize", JOB, "--partition", DAY)
    _succeeded(demo, done, _run_id(done))

    demo.model_gone()
    broken = demo.cli("dagster-graphbook", "materialize", JOB, "--partition", DAY)
    failed_id = _run_id(broken)
    _failed(demo, broken, failed_id)
    assert "no model checkpoint" in broken.stdout + broken.stderr, _text(broken)

    demo.model_back()
    resumed = demo.cli("dagster-graphbook", "materialize", JOB, "--from-failure", failed_id)
    run = _succeeded(demo, resumed, _run_id(resumed))
    assert run.parent_run_id == failed_id
    assert run.tags["dagster/partition"] == DAY


def test_run_of_the_workflow_file_and_its_resume_after_a_fix_exit_0(demo):
    """``dagster-graphbook run`` on the demo's workflow file (not partitioned: the day's folders
    are set), recorded into the instance; then failed for want of its model, fixed, resumed."""
    args = [
        "dagster-graphbook",
        "run",
        "workflows/nightly_shapes.json",
        "--custom-nodes",
        "custom_nodes/nightly",
        "--dagster-home",
        str(demo.home),
    ]
    day = ["--set", f"IncomingImages.folder=data/incoming/{DAY}"]
    day += ["--set", f"SaveResized.output_dir=outputs/{DAY}"]
    done = demo.cli(*args, *day)
    _succeeded(demo, done, _run_id(done))

    demo.model_gone()
    broken = demo.cli(*args, *day)
    failed_id = _run_id(broken)
    _failed(demo, broken, failed_id)

    demo.model_back()
    resumed = demo.cli(*args, "--from-failure", failed_id)
    run = _succeeded(demo, resumed, _run_id(resumed))
    assert run.parent_run_id == failed_id


def demo_job() -> dg.JobDefinition:
    """The demo job as the repository's code location defines it (``reconstructable`` target)."""
    import definitions_location

    return definitions_location.defs.resolve_job_def(JOB)


def test_execute_job_result_opens_after_a_successful_run(demo, monkeypatch):
    """Dagster's Python entry point, its result opened as a context (which builds the job's
    resources again, after the run)."""
    monkeypatch.chdir(demo.root)  # the workflow's data/, models/ and outputs/ resolve here
    with dg.DagsterInstance.from_config(str(demo.home)) as instance:
        with dg.execute_job(
            dg.reconstructable(demo_job), instance, tags={"dagster/partition": DAY}
        ) as result:
            assert result.success
            run_id = result.run_id
    done = subprocess.CompletedProcess([], 0, "", "")
    _succeeded(demo, done, run_id)


def test_a_run_the_nightly_schedule_requests_succeeds_through_the_run_launcher(demo):
    """The schedule's tick for the day after ``DAY`` (02:00 UTC) requests ``DAY``; the run is
    launched through the instance's run launcher from ``workspace.yaml``, as the daemon and the
    UI launch it (``dagster api execute_run``)."""
    import definitions_location

    tick = definitions_location.defs.resolve_schedule_def(f"{JOB}_nightly")
    when = datetime.datetime.fromisoformat(DAY).replace(
        hour=2, tzinfo=datetime.UTC
    ) + datetime.timedelta(days=1)
    with dg.instance_for_test() as scratch:
        data = tick.evaluate_tick(
            dg.build_schedule_context(instance=scratch, scheduled_execution_time=when)
        )
    (request,) = data.run_requests
    assert request.partition_key == DAY
    tags = {**request.tags, "dagster/partition": request.partition_key}
    launch = ["dagster", "job", "launch", "-w", "workspace.yaml", "-j", JOB]
    launch += ["--tags", json.dumps(tags)]
    if request.run_config:
        launch += ["--config-json", json.dumps(request.run_config)]
    out = demo.cli(*launch)
    assert out.returncode == 0, _text(out)
    with dg.DagsterInstance.from_config(str(demo.home)) as instance:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            runs = instance.get_runs(limit=1)
            if runs and runs[0].is_finished:
                break
            time.sleep(0.5)
        (run,) = instance.get_runs()
        assert run.is_finished, run
    run = _succeeded(demo, out, run.run_id)
    assert run.tags["dagster/partition"] == DAY


def test_dg_launch_of_a_failing_run_exits_non_zero_saying_it_failed(demo):
    """An image of the day that cannot be read: the batch step fails the run, and ``dg launch``
    exits 1 saying so, not with the verdict for a killed run."""
    incoming = demo.root / "data" / "incoming"
    incoming.unlink()
    shutil.copytree(demo.incoming, incoming)  # this test's own copy, to damage
    first = sorted((incoming / DAY).glob("*.png"))[0]
    first.write_bytes(b"not a PNG")
    out = demo.cli("dg", "launch", "--job", JOB, "--partition", DAY)
    with dg.DagsterInstance.from_config(str(demo.home)) as instance:
        (run,) = instance.get_runs()
    _failed(demo, out, run.run_id)
    assert f"Run {run.run_id} resulted in failure" in out.stdout + out.stderr, _text(out)
    assert first.name in out.stdout + out.stderr, _text(out)
