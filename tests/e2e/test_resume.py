"""Resuming a killed CLI run from failure: ``run WF --from-failure RUN_ID`` and
``materialize JOB --from-failure RUN_ID`` after a real ``kill -9`` mid batch step.

The source step appends its pid to a counter file each time it runs, so a resume that re-ran it
would show; the batch step's load_fn is slow enough to be killed in the middle of its 40 items.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import dagster as dg
import pytest
from upath import UPath

from dagster_graphbook.cli import main as cli
from dagster_graphbook.errors import RequestError
from dagster_graphbook.store.versions import read_notes, stored_notes_path
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

DEFS = """
from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions

defs = build_definitions(
    [GraphbookWorkflow({wf!r}, custom_nodes=[{nodes!r}],
                       partitions_def=daily_partitions("2026-01-01"))]
)
"""

RUN_LINE = re.compile(r"^run ([0-9a-f-]{36})$", re.M)
DAY = "2026-02-10"


def _workflow(tmp_path: Path, name: str = "resume"):
    """(custom node folder, workflow file, counter file) of Items -> Slow."""
    nodes = copy_nodes(tmp_path / "nodes", "resume_nodes.py", "resume")
    counter = tmp_path / "counter.txt"
    wf = write_workflow(
        tmp_path,
        name,
        [
            step_node("0", "Items", {"counter": str(counter)}, source=True),
            step_node("1", "Slow", {"sleep_s": 0, "marker": str(tmp_path / "marker")}),
        ],
        [edge("0", "out", "1")],
    )
    return nodes, wf, counter


def _start(args: List[str], cwd: Optional[Path] = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dagster_graphbook.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=cwd,
    )


def _kill_mid_batch(
    proc: subprocess.Popen, loads: int = 6, seen: Optional[List[str]] = None
) -> str:
    """Read until the batch step loaded ``loads`` items, then ``kill -9`` the CLI process (as
    the OOM killer does); returns the run id its progress display printed (``seen``: the lines
    read already)."""
    seen = list(seen or [])
    for line in proc.stdout:
        seen.append(line)
        if sum("LOADING" in s for s in seen) >= loads:
            break
    text = "".join(seen)
    assert sum("LOADING" in s for s in seen) >= loads, text[-3000:]
    proc.kill()
    proc.communicate(timeout=30)
    found = RUN_LINE.search(text)
    assert found, text[-3000:]
    return found.group(1)


def _finish(proc: subprocess.Popen, timeout: float = 180) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate()[0] + "\n(still running after the timeout)"
    return out


def _started_steps(instance: dg.DagsterInstance, run_id: str) -> List[str]:
    return sorted(
        r.step_key for r in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
    )


def _stored(instance: dg.DagsterInstance, run_id: str) -> Dict[str, str]:
    """Asset key -> stored notes file, of the materializations of run ``run_id``."""
    out = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = record.asset_materialization
        out[m.asset_key.to_user_string()] = stored_notes_path(m.metadata)
    return out


def _check_resumed(instance, killed, resumed, counter, partition=None) -> None:
    """``resumed`` ran only Slow, read Items' notes of ``killed`` and stored Slow's 4 notes with
    all 40 items loaded."""
    [pid] = counter.read_text().split()  # Items ran once: in the killed run
    for run_id in resumed:
        assert _started_steps(instance, run_id) == ["resume__Slow"]
    items = _stored(instance, killed)
    assert list(items) == ["resume/Items"], "the killed run had stored Items' notes"
    assert Path(items["resume/Items"]).name == f"{killed}.pkl"
    final = resumed[-1]
    slow = _stored(instance, final)
    assert list(slow) == ["resume/Slow"]
    notes = read_notes(UPath(slow["resume/Slow"]), dg.AssetKey(["resume", "Slow"]), partition)
    assert [n["loaded"] for n in notes] == [[f"n{n}i{k}" for k in range(10)] for n in range(4)]
    assert {n["by"] for n in notes} == {int(pid)}, "Slow read notes of another Items run"
    assert {n["day"] for n in notes} == {partition}


def test_a_killed_cli_run_is_resumed_from_its_batch_step(tmp_path, dagster_home, capsys):
    """kill -9 in the batch step; ``run --from-failure`` (refused while the run is alive) sweeps
    the dead run, re-runs only the batch step and reads the source's notes of the killed run. The
    resume is owned like any run: killed in turn, the next resume finds it dead and resumes it."""
    nodes, wf, counter = _workflow(tmp_path)
    base = [str(wf), "--custom-nodes", str(nodes), "--dagster-home", dagster_home]
    first = _start(
        ["run", *base, "--set", "Slow.sleep_s=0.1", "--set", "Slow.runtime.num_workers=1"]
    )
    try:
        seen = []
        for line in first.stdout:
            seen.append(line)
            if "LOADING" in line:
                break
        [live] = RUN_LINE.findall("".join(seen))
        code = cli.main(["run", *base, "--from-failure", live, "--no-progress"])
        err = capsys.readouterr().err
        assert code == 1 and "still in progress (STARTED)" in err, err
        killed = _kill_mid_batch(first, seen=seen)
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            assert instance.get_run_by_id(killed).status == dg.DagsterRunStatus.STARTED

        second = _start(["run", *base, "--from-failure", killed])
        resumed1 = _kill_mid_batch(second)
        third = _start(["run", *base, "--from-failure", resumed1])
        out = _finish(third)
    finally:
        for proc in (first, locals().get("second"), locals().get("third")):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert third.returncode == 0, out[-3000:]
    assert f"run {resumed1} was left in progress by a process that is gone" in out
    [resumed2] = RUN_LINE.findall(out)
    assert re.search(r"Items +out: 4 notes", out) and re.search(r"Slow +out: 4 notes", out), out
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        runs = {r.run_id: r for r in instance.get_runs()}
        assert set(runs) == {killed, resumed1, resumed2}
        assert runs[killed].status == runs[resumed1].status == dg.DagsterRunStatus.FAILURE
        assert runs[resumed2].status == dg.DagsterRunStatus.SUCCESS
        assert runs[resumed1].parent_run_id == killed
        assert runs[resumed2].parent_run_id == resumed1
        assert runs[resumed2].root_run_id == killed
        assert runs[resumed2].tags["dagster/parent_run_id"] == resumed1
        assert runs[resumed2].run_config == runs[killed].run_config  # sleep_s, num_workers kept
        _check_resumed(instance, killed, [resumed1, resumed2], counter)

    # refusals: a run that succeeded, an unknown id, another workflow's run, new parameters
    other = write_workflow(tmp_path, "other", [step_node("0", "Items", {}, source=True)], [])
    cases = [
        (["run", *base, "--from-failure", resumed2], "it succeeded, so there is nothing"),
        (["run", *base, "--from-failure", str(uuid.uuid4())], "no such run in the instance"),
        (
            ["run", str(other), "--custom-nodes", str(nodes), "--dagster-home", dagster_home,
             "--from-failure", killed],
            "it is a run of job 'resume', not of 'other'",
        ),
        (["run", *base, "--from-failure", killed, "--set", "Slow.sleep_s=0"],
         "give no parameters (--set) with --from-failure"),
    ]  # fmt: skip
    for args, expected in cases:
        assert cli.main([*args, "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err, err
    assert len(counter.read_text().split()) == 1, "a refused resume ran a step"


def _api(api: str, tmp_path: Path, instance: dg.DagsterInstance):
    """(a call of ``run_workflow`` or ``run_job`` on the Items -> Slow workflow, counter, day)."""
    from dagster_graphbook import run_workflow
    from dagster_graphbook.runner.run import run_job

    nodes, wf, counter = _workflow(tmp_path)
    if api == "run_workflow":
        return (lambda **kw: run_workflow(wf, [nodes], instance=instance, **kw)), counter, None
    module = f"resume_defs_{tmp_path.name}"  # imported in this process: a name of its own
    (tmp_path / f"{module}.py").write_text(DEFS.format(wf=str(wf), nodes=str(nodes)))
    return (
        (lambda **kw: run_job("resume", module=module, instance=instance, **kw)),
        counter,
        DAY,
    )


@pytest.mark.parametrize("api", ["run_workflow", "run_job"])
def test_python_api_resumes_a_failed_run(tmp_path, dagster_home, api, monkeypatch):
    """``run_workflow(..., from_failure=)`` / ``run_job(..., from_failure=)``, the path the CLI
    takes: a run whose batch step failed is resumed once the cause is gone; the WorkflowRun holds
    the notes of both steps, Items' those of the failed run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # run_job puts the cwd on it
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        go, counter, day = _api(api, tmp_path, instance)
        partition = {"partition_key": day} if day else {}
        (tmp_path / "marker").touch()
        failed = go(**partition)
        assert not failed.success and "the marker file is there" in failed.failure
        (tmp_path / "marker").unlink()
        with pytest.raises(RequestError, match="give no parameters"):
            go(params={"Slow.sleep_s": 0}, from_failure=failed.run_id)
        run = go(from_failure=failed.run_id)
        assert run.success, run.failure
        assert instance.get_run_by_id(run.run_id).parent_run_id == failed.run_id
        assert run.counts() == {"Items": {"out": 4}, "Slow": {"out": 4}}
        _check_resumed(instance, failed.run_id, [run.run_id], counter, day)
        assert run["Items"]["out"][0]["by"] == int(counter.read_text())


def test_unknown_run_lists_the_failed_runs_of_the_job(tmp_path, dagster_home, capsys):
    """A mistyped id names the instance searched and the job's latest failed runs to pick from."""
    nodes, wf, counter = _workflow(tmp_path)
    base = [str(wf), "--custom-nodes", str(nodes), "--dagster-home", dagster_home, "--no-progress"]
    (tmp_path / "marker").touch()
    assert cli.main(["run", *base]) == 1
    capsys.readouterr()
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        [failed] = instance.get_runs()
        assert failed.status == dg.DagsterRunStatus.FAILURE
    assert cli.main(["run", *base, "--from-failure", "no-such-run"]) == 1
    err = capsys.readouterr().err
    assert f"no such run in the instance at {dagster_home}" in err, err
    assert f"the latest failed runs of job resume there: {failed.run_id}" in err, err


def test_materialize_resumes_a_killed_partition_of_a_code_location_job(tmp_path, dagster_home):
    """The user's case: ``materialize`` of one day killed mid batch step; ``materialize JOB
    --from-failure`` resumes that day (partition tag and --set kept) instead of recomputing."""
    nodes, wf, counter = _workflow(tmp_path)
    (tmp_path / "resume_defs.py").write_text(DEFS.format(wf=str(wf), nodes=str(nodes)))
    base = ["materialize", "resume", "--module", "resume_defs", "--dagster-home", dagster_home]
    first = _start([*base, "--partition", DAY, "--set", "Slow.sleep_s=0.1"], cwd=tmp_path)
    try:
        killed = _kill_mid_batch(first)
        refused = subprocess.run(
            [sys.executable, "-m", "dagster_graphbook.cli", *base, "--from-failure", killed,
             "--partition", DAY, "--no-progress"],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip
        second = _start([*base, "--from-failure", killed], cwd=tmp_path)
        out = _finish(second)
    finally:
        for proc in (first, locals().get("second")):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "give no partition key (--partition) with --from-failure" in refused.stderr, (
        refused.stderr
    )
    assert second.returncode == 0, out[-3000:]
    assert f"run {killed} was left in progress by a process that is gone" in out
    [resumed] = RUN_LINE.findall(out)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        run = instance.get_run_by_id(resumed)
        parent = instance.get_run_by_id(killed)
        assert parent.status == dg.DagsterRunStatus.FAILURE
        assert run.status == dg.DagsterRunStatus.SUCCESS and run.parent_run_id == killed
        assert run.tags["dagster/partition"] == DAY
        assert run.run_config == parent.run_config
        _check_resumed(instance, killed, [resumed], counter, DAY)
