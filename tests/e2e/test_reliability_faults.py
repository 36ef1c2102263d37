"""Reliability under faults, through real Dagster runs with real worker processes: a loader or
dump worker killed with SIGKILL mid-run, ``on_item_batch`` and ``dump_fn`` raising, a real
disk-full ``OSError`` (``/dev/full``), and op retries that leave each output file exactly once.
After every run: no worker process, file descriptor or ``/dev/shm`` entry is left behind."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from tests.support.leaks import Leaks, shm_leaks, shm_snapshot
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow

WORKERS = {
    "Work.runtime.num_workers": 2,
    "Work.runtime.worker_type": "process",
    "Work.runtime.device": "cpu",
    "Work.runtime.dump_workers": 2,
}


@pytest.fixture
def fault_wf(tmp_path):
    nodes = copy_nodes(tmp_path / "fault_nodes", "fault_nodes.py", "faults")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    wf = write_workflow(
        tmp_path,
        "faults",
        [step_node("1", "Items", source=True), step_node("2", "Work", {"out_dir": str(out_dir)})],
        [edge("1", "out", "2")],
    )
    return wf, nodes, out_dir


@pytest.fixture
def leaks(dagster_home):
    import dagster_graphbook.execution.pools.loader  # noqa: F401  (import torch etc. before the snapshot)

    dg.DagsterInstance.from_config(dagster_home).dispose()  # let the instance open its files first
    return Leaks()


def _kill_first_worker(pid_dir: Path, kind: str, timeout_s: float = 60.0) -> dict:
    """Wait (in a thread) for a worker of ``kind`` to start, SIGKILL it, and record when."""
    seen: dict = {}

    def killer() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            marks = sorted(pid_dir.glob(f"{kind}-*"))
            if marks:
                time.sleep(0.3)  # mid-run: let it get going
                pid = int(marks[0].name.split("-")[1])
                os.kill(pid, signal.SIGKILL)
                seen.update(pid=pid, at=time.monotonic())
                return
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    seen["thread"] = thread
    return seen


@pytest.mark.parametrize(
    "kind, message",
    [("load", "a loader worker process died"), ("dump", "a dump worker process died")],
)
def test_worker_killed_with_sigkill_fails_the_op_within_seconds(
    fault_wf, run_wf, tmp_path, leaks, kind, message
):
    wf, nodes, _ = fault_wf
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    killed = _kill_first_worker(pid_dir, kind)
    # 400 items at 20 ms each: about 4 s of work for 2 workers, so the kill lands mid-run
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params={**WORKERS, "Items.n": 400, "Work.pid_dir": str(pid_dir), "Work.delay": 0.02},
    )
    detected_s = time.monotonic() - killed["at"]
    killed["thread"].join()
    assert not run.success
    assert "workflow 'faults', step 'Work' (node 2)" in run.failure and message in run.failure
    print(f"\n{kind} worker {killed['pid']} SIGKILLed: run failed {detected_s:.2f} s later")
    assert detected_s < 15, f"a dead {kind} worker took {detected_s:.1f} s to fail the op"
    leaks.check()


def test_on_item_batch_raising_fails_naming_the_item_and_cleans_up(
    fault_wf, run_wf, leaks, dagster_home
):
    wf, nodes, out_dir = fault_wf
    run = run_wf(wf, custom_nodes=[nodes], params={**WORKERS, "Work.explode_at": 13})
    assert not run.success
    assert (
        "step 'Work' (node 2): on_item_batch failed on item 12 (note 1, item 2)" in run.failure
    )  # first item of the batch 12..15
    assert "RuntimeError: model exploded on 13" in run.failure
    leaks.check()

    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params={**WORKERS, "Work.explode_at": 13, "Work.runtime.on_item_error": "skip"},
    )
    assert run.success, run.failure
    loaded = [v for n in run.notes["Work"]["out"] for v in n.get("loaded", [])]
    assert loaded == [i * 10 for i in range(40) if not 12 <= i < 16]
    assert sorted(int(p.stem) for p in out_dir.iterdir()) == [
        i for i in range(40) if not 12 <= i < 16
    ]  # the failed batch dumps nothing
    leaks.check()


def test_dump_fn_raising_fails_naming_the_item_or_is_recorded(
    fault_wf, run_wf, leaks, dagster_home
):
    wf, nodes, out_dir = fault_wf
    run = run_wf(wf, custom_nodes=[nodes], params={**WORKERS, "Work.bad_dump": 21})
    assert not run.success
    assert (
        "step 'Work' (node 2): dump_fn failed on item 21 (note 2, item 1)" in run.failure
        and "ValueError: cannot write 210" in run.failure
    )
    leaks.check()
    for p in out_dir.iterdir():
        p.unlink()

    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params={**WORKERS, "Work.bad_dump": 21, "Work.runtime.on_item_error": "skip"},
    )
    assert run.success, run.failure
    assert sorted(int(p.stem) for p in out_dir.iterdir()) == [i for i in range(40) if i != 21]
    event = dg.DagsterInstance.from_config(dagster_home).get_latest_materialization_event(
        dg.AssetKey(["faults", "Work"])
    )
    md = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert md["errors_skipped"] == 1 and md["files_written"] == 39
    (row,) = [r.data for r in md["errors"].records]
    assert (row["stage"], row["note"], row["item"]) == ("dump_fn", 2, "1: 21")
    leaks.check()


def test_disk_full_on_write_fails_naming_the_item(fault_wf, run_wf, leaks):
    """``/dev/full`` answers every write with a real ENOSPC from the kernel."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    wf, nodes, out_dir = fault_wf
    run = run_wf(wf, custom_nodes=[nodes], params={**WORKERS, "Work.full_item": 30})
    assert not run.success
    assert "step 'Work' (node 2): dump_fn failed on item 30 (note 3, item 0)" in run.failure
    assert f"[Errno {errno.ENOSPC}] No space left on device" in run.failure
    leaks.check()

    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params={**WORKERS, "Work.full_item": 30, "Work.runtime.on_item_error": "skip"},
    )
    assert run.success, run.failure
    assert sorted(int(p.stem) for p in out_dir.iterdir()) == [
        i for i in range(40) if i != 30
    ]  # item 30 only ever went to /dev/full
    leaks.check()


# ---------------------------------------------------------------------------------------------
# Retries: the step runs again from its stored inputs; files and sink lines end up exactly once


@pytest.fixture
def retry_wf(tmp_path):
    nodes = copy_nodes(tmp_path / "fault_nodes", "fault_nodes.py", "faults")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    jsonl = tmp_path / "sink" / "notes.jsonl"
    marker = tmp_path / "first_attempt_failed"
    wf = write_workflow(
        tmp_path,
        "retried",
        [
            step_node("1", "Items", source=True),
            step_node("2", "Work", {"out_dir": str(out_dir), "fail_once_marker": str(marker)}),
            step_node("3", "DumpJSONL"),
            resource_node("4", "Text", {"val": str(jsonl)}, label="SinkPath"),
        ],
        [edge("1", "out", "2"), edge("2", "out", "3"), edge("4", "resource", "3", "jsonl_path")],
    )
    return wf, nodes, out_dir, jsonl, marker


def _step_events(
    dagster_home: str, run_id: str, event_type: dg.DagsterEventType, step: str
) -> list:
    instance = dg.DagsterInstance.from_config(dagster_home)
    return [r for r in instance.all_logs(run_id, of_type=event_type) if r.step_key == step]


def _check_outputs_once(out_dir: Path, jsonl: Path) -> None:
    assert sorted(int(p.stem) for p in out_dir.iterdir()) == list(range(40))
    assert all((out_dir / f"{i}.txt").read_text() == f"{i * 10}\n" for i in range(40))
    import json

    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [n["id"] for n in lines] == [0, 1, 2, 3]
    assert [v for n in lines for v in n["loaded"]] == [i * 10 for i in range(40)]
    assert sorted(p.name for p in jsonl.parent.iterdir()) == [
        "notes.jsonl"
    ]  # no temporary file left


def test_retry_from_run_config_produces_each_output_once(retry_wf, run_wf, leaks, dagster_home):
    wf, nodes, out_dir, jsonl, marker = retry_wf
    run = run_wf(wf, custom_nodes=[nodes], params={**WORKERS, "Work.runtime.retries": 2})
    assert run.success, run.failure
    assert marker.exists()  # the first attempt did fail, after writing files of its first batches
    assert (
        len(
            _step_events(
                dagster_home, run.run_id, dg.DagsterEventType.STEP_UP_FOR_RETRY, "retried__Work"
            )
        )
        == 1
    )
    assert (
        len(
            _step_events(
                dagster_home, run.run_id, dg.DagsterEventType.STEP_SUCCESS, "retried__Work"
            )
        )
        == 1
    )
    _check_outputs_once(out_dir, jsonl)
    notes = run.notes["Work"]["out"]
    assert [v for n in notes for v in n["loaded"]] == [
        i * 10 for i in range(40)
    ]  # retried from clean inputs: no doubles
    leaks.check()


def test_retries_spent_fail_with_the_steps_own_error(retry_wf, run_wf, dagster_home, leaks):
    wf, nodes, *_ = retry_wf
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params={**WORKERS, "Work.runtime.retries": 1, "Work.explode_at": 5},
    )
    assert not run.success
    assert (
        len(
            _step_events(
                dagster_home, run.run_id, dg.DagsterEventType.STEP_UP_FOR_RETRY, "retried__Work"
            )
        )
        == 1
    )
    assert (
        "on_item_batch failed on item 4 (note 0, item 4)" in run.failure
        and "model exploded on 5" in run.failure
    )
    leaks.check()


def test_retry_policy_from_the_code_location(retry_wf, dagster_home):
    """``GraphbookWorkflow(retry_policy=...)``: Dagster's own RetryPolicy on every step op."""
    wf, nodes, out_dir, jsonl, marker = retry_wf
    defs = build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes], retry_policy=dg.RetryPolicy(max_retries=1))]
    )
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("retried").execute_in_process(
            instance=instance, raise_on_error=False
        )
    assert result.success
    assert marker.exists()
    assert [
        e.step_key
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.STEP_UP_FOR_RETRY
    ] == ["retried__Work"]
    _check_outputs_once(out_dir, jsonl)


# ---------------------------------------------------------------------------------------------
# Terminate from the UI: the webserver's terminateRun mutation against a run launched like the
# Launchpad does (code server -> run worker -> multiprocess executor -> step process -> pools)

LAUNCH_RUN = """
mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }
"""
TERMINATE_RUN = """
mutation($runId: String!) { terminateRun(runId: $runId) {
  __typename ... on TerminateRunFailure { message } ... on PythonError { message } } }
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(predicate, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def test_terminate_from_the_ui_cleans_up_workers_and_shared_memory(
    fault_wf, tmp_path, dagster_home
):
    from dagster_graphql.test.utils import (
        define_out_of_process_context,
        execute_dagster_graphql,
        main_repo_location_name,
    )

    wf, nodes, out_dir = fault_wf
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    location = tmp_path / "location.py"
    location.write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(wf)!r}, "
        f"custom_nodes=[{str(nodes)!r}])])\n"
    )
    config = (
        {"n": 4000},
        {
            "pid_dir": str(pid_dir),
            "delay": 0.02,
            "runtime": {"num_workers": 2, "dump_workers": 2, "device": "cpu"},
        },
    )
    run_config = {
        "ops": {"faults__Items": {"config": config[0]}, "faults__Work": {"config": config[1]}}
    }
    # launch at once, as `dagster dev` does with its daemon (the default coordinator only queues)
    Path(dagster_home, "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: "
        "DefaultRunCoordinator\ntelemetry:\n  enabled: false\n"
    )
    before_shm = shm_snapshot()
    with (
        dg.DagsterInstance.from_config(dagster_home) as instance,
        define_out_of_process_context(str(location), "defs", instance) as context,
    ):
        service = {p.pid for p in psutil.Process().children(recursive=True)}  # the code server
        selector = {
            "repositoryLocationName": main_repo_location_name(),
            "repositoryName": "__repository__",
            "jobName": "faults",
        }
        launched = execute_dagster_graphql(
            context, LAUNCH_RUN, {"p": {"selector": selector, "runConfigData": run_config}}
        ).data["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]

        def pools_busy() -> bool:  # about 40 s of work is queued: wait until both pools are at it
            run = instance.get_run_by_id(run_id)
            if run.is_finished or time.monotonic() - launched_at > 120:
                events = "\n".join(str(r.message)[:300] for r in instance.all_logs(run_id)[-15:])
                raise AssertionError(
                    f"the run is {run.status.value} and its pools are not busy:\n{events}"
                )
            return len(list(pid_dir.glob("load-*"))) >= 2 and len(list(pid_dir.glob("dump-*"))) >= 1

        launched_at = time.monotonic()
        _wait_for(pools_busy, 150, "the loader and dump workers to start")
        workers = [int(p.name.split("-")[1]) for p in pid_dir.iterdir()]
        step_process = psutil.Process(workers[0]).parent()
        tree = {step_process.pid, *workers}
        assert all(_alive(pid) for pid in tree)

        start = time.monotonic()
        result = execute_dagster_graphql(context, TERMINATE_RUN, {"runId": run_id}).data[
            "terminateRun"
        ]
        assert result["__typename"] == "TerminateRunSuccess", result
        gone_s = _wait_for(
            lambda: not any(_alive(pid) for pid in tree),
            30,
            "the step process and its workers to exit",
        )
        _wait_for(
            lambda: instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED,
            30,
            "the run to be CANCELED",
        )
        canceled_s = time.monotonic() - start

        def shm_clean() -> bool:
            # Dagster's run worker makes spawn-context semaphores (sem.mp-*) that the code server's
            # resource tracker removes when the code server stops (after a successful run too); the
            # pools use fork, whose semaphores never show up in /dev/shm. Anything else is the
            # run's.
            run_tree = {p.pid for p in psutil.Process().children(recursive=True)} - service
            return not shm_leaks(before_shm, mine=run_tree, grace_s=0, ignore=("sem.mp-",))

        shm_s = _wait_for(shm_clean, 30, "the run's /dev/shm entries to go") + canceled_s
    assert shm_leaks(before_shm, mine={psutil.Process().pid}, grace_s=10) == set(), (
        "shared memory left in /dev/shm after the code server stopped"
    )
    print(
        f"\nterminate: step process and {len(workers)} pool workers gone {gone_s:.2f} "
        "s after terminateRun, "
        f"run CANCELED after {canceled_s:.2f} s, its /dev/shm entries gone after {shm_s:.2f} s"
    )
    assert gone_s < 15, f"workers took {gone_s:.1f} s to go after terminate"
    assert sorted(int(p.stem) for p in out_dir.iterdir()) != list(
        range(4000)
    )  # it really was stopped mid-run
