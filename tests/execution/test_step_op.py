"""Batch steps run as real Dagster ops: a retry after a failure in the middle of a dump, terminating
a run launched in its own process, start methods that cannot import the step, the ``gpu`` pool."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from tests.support.leaks import shm_leaks, shm_snapshot
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

PROCESSES = {
    "Work.runtime.num_workers": 2,
    "Work.runtime.worker_type": "process",
    "Work.runtime.device": "cpu",
    "Work.runtime.dump_workers": 2,
}


@pytest.fixture
def op_wf(tmp_path):
    nodes = copy_nodes(tmp_path / "op_nodes", "op_nodes.py", "step_op")
    out_dir, pid_dir = tmp_path / "out", tmp_path / "pids"
    out_dir.mkdir()
    pid_dir.mkdir()
    params = {
        "out_dir": str(out_dir),
        "pid_dir": str(pid_dir),
        "marker": str(tmp_path / "failed_once"),
    }
    wf = write_workflow(
        tmp_path,
        "batchop",
        [step_node("1", "Items", source=True), step_node("2", "Work", params)],
        [edge("1", "out", "2")],
    )
    return wf, nodes, out_dir, pid_dir, tmp_path / "failed_once"


def _gone(pids, within_s: float) -> list:
    """The pids still running (not zombies) after waiting up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _marked_pids(pid_dir: Path) -> set:
    return {int(p.name.split("-")[1]) for p in pid_dir.iterdir()}


# ---------------------------------------------------------------------------------------------
# A retry after a failure in the middle of a dump


def test_retry_after_failing_mid_dump_writes_each_file_once_and_whole(op_wf, run_wf, dagster_home):
    wf, nodes, out_dir, pid_dir, marker = op_wf
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params={
            **PROCESSES,
            "Work.runtime.retries": 1,
            "Work.fail_once_at": 13,
            "Work.delay": 0.02,
        },
    )
    assert run.success, run.failure
    assert (
        marker.exists()
    )  # the first attempt failed inside dump_fn, with a half-written temporary file open
    instance = dg.DagsterInstance.from_config(dagster_home)
    retried = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)
    assert [r.step_key for r in retried] == ["batchop__Work"]
    warnings = [
        r.user_message
        for r in instance.all_logs(run.run_id)
        if r.dagster_event is None and "attempt 1 of 2 failed" in r.user_message
    ]
    assert len(warnings) == 1 and "dump_fn failed on item 13 (note 2, item 3)" in warnings[0]
    # every output exactly once, complete, under its final name; no temporary file left behind
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(f"{i}.txt" for i in range(24))
    assert all((out_dir / f"{i}.txt").read_text() == f"{float(i)}\nend\n" for i in range(24))
    notes = run.notes["Work"]["out"]
    assert [n["id"] for n in notes] == [0, 1, 2, 3, 4]
    assert [m for n in notes for m in n["means"]] == [
        float(i) for i in range(24)
    ]  # the retry started from clean inputs
    assert {n["device"] for n in notes} == {"cpu"}
    event = instance.get_latest_materialization_event(dg.AssetKey(["batchop", "Work"]))
    md = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert md["items"] == 24 and md["details"]["dumps"] == 24 and md["files_written"] == 24


def test_failed_dump_waits_for_dumps_in_flight_before_stopping_the_pool(op_wf, run_wf):
    """Without a retry: the op fails naming the item, and the other dumps in flight finish
    (killing them would strand their temporary files)."""
    wf, nodes, out_dir, pid_dir, marker = op_wf
    run = run_wf(
        wf, custom_nodes=[nodes], params={**PROCESSES, "Work.fail_once_at": 13, "Work.delay": 0.1}
    )
    assert not run.success
    assert (
        "dump_fn failed on item 13 (note 2, item 3)" in run.failure
        and "storage went away" in run.failure
    )
    names = [p.name for p in out_dir.iterdir()]
    assert names and all(not n.startswith(".tmp-") for n in names), names
    assert all((out_dir / n).read_text().endswith("end\n") for n in names)
    assert _gone(_marked_pids(pid_dir), 5) == []


# ---------------------------------------------------------------------------------------------
# Start methods that cannot import the step fail at once, saying why


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_start_method_that_cannot_import_load_fn_fails_at_once(op_wf, run_wf, start_method):
    wf, nodes, out_dir, pid_dir, _ = op_wf
    t0 = time.perf_counter()
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params={**PROCESSES, "Work.runtime.start_method": start_method, "Work.delay": 5.0},
    )
    elapsed = time.perf_counter() - t0
    assert not run.success
    assert "step 'Work' (node 2)" in run.failure
    assert f"a file loaded by path that {start_method} workers cannot import" in run.failure
    assert "use start_method 'fork'" in run.failure
    assert list(pid_dir.iterdir()) == []  # no worker was started, so nothing loaded
    assert elapsed < 30  # no hang waiting for workers (each item would take 5 s)


# ---------------------------------------------------------------------------------------------
# The gpu concurrency pool


def test_batch_ops_carry_the_gpu_pool_and_claim_it_when_limited(op_wf, dagster_home):
    wf, nodes, *_ = op_wf
    defs = build_definitions([GraphbookWorkflow(wf, custom_nodes=[nodes])])
    job = defs.resolve_job_def("batchop")
    assert {node.name: node.definition.pool for node in job.graph.node_dict.values()} == {
        "batchop__Items": None,
        "batchop__Work": "gpu",
    }

    claims, done = [], threading.Event()

    def watch():  # what the instance says is holding the pool's slot while the run goes on
        with dg.DagsterInstance.from_config(dagster_home) as inst:
            while not done.is_set():
                claims.append(
                    sorted(
                        c.step_key
                        for c in inst.event_log_storage.get_concurrency_info("gpu").claimed_slots
                    )
                )
                time.sleep(0.02)

    with dg.DagsterInstance.from_config(dagster_home) as instance:
        instance.event_log_storage.set_concurrency_slots("gpu", 1)
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            config = {"delay": 0.03, "runtime": {"num_workers": 0, "device": "cpu"}}
            result = job.execute_in_process(
                instance=instance,
                raise_on_error=False,
                run_config={"ops": {"batchop__Work": {"config": config}}},
            )
        finally:
            done.set()
            watcher.join()
        assert result.success
        assert ["batchop__Work"] in claims  # the batch op held the gpu slot while it ran
        assert all(
            c in ([], ["batchop__Work"]) for c in claims
        )  # and only it (the source step has no pool)
        assert (
            instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []
        )  # freed afterwards


# ---------------------------------------------------------------------------------------------
# Terminating a run launched in its own process


DEFS = """
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    defs = build_definitions([GraphbookWorkflow({wf!r}, custom_nodes=[{nodes!r}])])
    """

RUN_CONFIG = """
    execution:
      config:
        in_process: {}
    ops:
      batchop__Items:
        config: {n: 4000, per_note: 50}
      batchop__Work:
        config:
          delay: 0.02
          runtime: {num_workers: 2, worker_type: process, device: cpu, dump_workers: 2}
    """


def test_terminate_mid_run_stops_every_worker_and_frees_shared_memory(
    op_wf, dagster_home, tmp_path
):
    """``dagster job execute`` runs the job as a run worker would, and SIGTERM is what stopping it
    sends: Dagster turns it into an interrupt of the step (under the multiprocess executor it
    forwards it to the step process as the same interrupt; the in-process executor here saves
    starting one per step), and the batch op must stop its loader and dump workers on the way
    out."""
    wf, nodes, out_dir, pid_dir, _ = op_wf
    (tmp_path / "defs.py").write_text(textwrap.dedent(DEFS.format(wf=str(wf), nodes=str(nodes))))
    (tmp_path / "run.yaml").write_text(textwrap.dedent(RUN_CONFIG))
    (Path(dagster_home) / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    shm_before = shm_snapshot()
    env = {**os.environ, "DAGSTER_HOME": dagster_home}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagster",
            "job",
            "execute",
            "-f",
            str(tmp_path / "defs.py"),
            "-j",
            "batchop",
            "-c",
            str(tmp_path / "run.yaml"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while (
            len({p.name.split("-")[0] for p in pid_dir.iterdir()}) < 2
        ):  # loading and dumping are under way
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the batch op never started its workers"
            time.sleep(0.1)
        started_s = time.monotonic() - deadline + 60
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        workers = _marked_pids(pid_dir)
        assert workers and workers <= set(tree)  # loader and dump workers, under the step process
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        proc.wait(timeout=30)
        stopped_s = time.monotonic() - t0
        output = proc.stdout.read().decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert _gone(tree, 3) == [], f"processes outlived the terminated run: {_gone(tree, 0)}"
    print(
        f"\nworkers started {started_s:.1f} s after launch; run stopped "
        f"{stopped_s:.2f} s after SIGTERM"
    )
    assert stopped_s < 15, output[-3000:]
    # /dev/shm is the machine's: only what the run's processes left counts, not what other
    # programs hold meanwhile
    left = shm_leaks(shm_before, mine={os.getpid(), proc.pid, *tree})
    assert {n for n in left if n.startswith("torch_")} == set()
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        (run,) = instance.get_runs()
        assert run.status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE), run.status
        steps = {
            r.step_key: r.dagster_event.event_type
            for r in instance.all_logs(run.run_id)
            if r.dagster_event and r.dagster_event.is_step_event
        }
    assert (
        steps.get("batchop__Work") == dg.DagsterEventType.STEP_FAILURE
    )  # stopped mid-step, not finished
    assert len(list(out_dir.iterdir())) < 4000
    assert not any(p.name.startswith(".tmp-") for p in out_dir.iterdir())


# ---------------------------------------------------------------------------------------------
# The GPU out of memory: no retry, under skip too


def test_a_gpu_out_of_memory_fails_the_step_at_once_without_its_retries(tmp_path, run_wf):
    """A retry would run the same batch size into the same wall: runtime.retries is not spent on
    it (the model reloaded each time), and skip does not skip every batch."""
    nodes = copy_nodes(tmp_path / "oom_nodes", "oom_nodes.py", "step_op_oom")
    calls = tmp_path / "calls"
    calls.mkdir()
    wf = write_workflow(
        tmp_path,
        "oomwf",
        [step_node("1", "Items", source=True), step_node("2", "Model", {"calls": str(calls)})],
        [edge("1", "out", "2")],
    )
    params = {"Model.runtime.retries": 2, "Model.runtime.on_item_error": "skip"}
    run = run_wf(wf, [nodes], {**params, "Model.runtime.device": "cpu"})
    assert not run.success
    assert "CUDA ran out of memory in on_item_batch on a batch of 2 items" in run.failure
    assert "lower batch_size (--set Model.batch_size=1" in run.failure
    assert len(list(calls.iterdir())) == 1  # one call: no retry, no second batch
