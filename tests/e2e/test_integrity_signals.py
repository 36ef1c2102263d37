"""SIGINT/SIGTERM stop the CLI within 10 s while a load_fn hangs for real.

The hang is ``time.sleep(3600)`` in a thread-pool thread (cannot be interrupted) or in a DataLoader
worker process; the run record must end FAILURE or CANCELED, never stay STARTED.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import dagster as dg
import psutil
import pytest

from tests.support.mounts import can_make_read_only, read_only_switch
from tests.support.nodes import copy_nodes
from tests.support.webserver import serve_webserver
from tests.support.workflows import edge, step_node, write_workflow


def _hang_workflow(tmp_path):
    """A source feeding ``Stuck``, whose load_fn hangs: (node folder, workflow file)."""
    nodes = copy_nodes(tmp_path / "nodes", "hang_nodes.py", "signal_steps")
    wf = write_workflow(
        tmp_path,
        "hang",
        [
            step_node("0", "Items", {}, source=True),
            step_node("1", "Stuck", {"batch_size": 2, "item_key": "items"}),
        ],
        [edge("0", "out", "1")],
    )
    return nodes, wf


def _signal_when_loading(proc, sig, dagster_home):
    """Send ``sig`` once the load_fn hangs; the process and its group must be gone within 10 s
    and the run record ended FAILURE or CANCELED."""
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "LOADING" in line:
                break
        assert any("LOADING" in line for line in lines), "".join(lines)[-3000:]
        start = time.monotonic()
        proc.send_signal(sig)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            out = "(still running 30 s after the signal)"
        seconds = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert seconds < 10, f"took {seconds:.1f} s\n{out[-3000:]}"
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        [run] = instance.get_runs()
    assert run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
    with pytest.raises(ProcessLookupError):  # nothing of the run's process group is left
        os.killpg(proc.pid, 0)


@pytest.mark.parametrize(
    "worker_type, sig",
    [("thread", signal.SIGINT), ("process", signal.SIGTERM)],
    ids=["thread-SIGINT", "process-SIGTERM"],
)
def test_a_signal_ends_a_run_with_a_hung_load_fn_within_10_s(
    tmp_path, dagster_home, worker_type, sig
):
    nodes, wf = _hang_workflow(tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "dagster_graphbook.cli",
        "run",
        str(wf),
        "--custom-nodes",
        str(nodes),
        "--dagster-home",
        dagster_home,
        "--set",
        f"Stuck.runtime.worker_type={worker_type}",
        "--set",
        "Stuck.runtime.num_workers=1",
        "--no-progress",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    _signal_when_loading(proc, sig, dagster_home)
    assert proc.returncode == 1


def test_terminating_a_dagster_run_with_a_hung_thread_ends_its_process(tmp_path, dagster_home):
    """What a run worker of a UI launch does: Dagster's own entry point (``dagster job execute``),
    no CLI of ours. After SIGTERM (what Terminate sends) the process must end too, not wait
    forever at exit for the load_fn thread stuck in ``time.sleep``."""
    nodes, wf = _hang_workflow(tmp_path)
    defs = tmp_path / "hang_defs.py"
    defs.write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(wf)!r}, "
        f"custom_nodes=[{str(nodes)!r}])])\n"
    )
    config = tmp_path / "run.yaml"
    config.write_text(
        "ops:\n  hang__Stuck:\n    config:\n      runtime: {worker_type: thread, num_workers: 1}\n"
    )
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    proc = subprocess.Popen(
        [dagster, "job", "execute", "-f", str(defs), "-j", "hang", "-c", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "DAGSTER_HOME": dagster_home},
    )
    _signal_when_loading(proc, signal.SIGTERM, dagster_home)


def test_a_run_killed_with_sigkill_is_failed_and_frees_its_pool_slot(tmp_path, dagster_home):
    """kill -9 of a CLI run inside a batch step (pool ``gpu`` limited to 1): the next run fails the
    dead run in the instance, frees its slot and succeeds, instead of waiting for it forever."""
    nodes = copy_nodes(tmp_path / "nodes", "killed_nodes.py", "signal_killed")
    wf = write_workflow(
        tmp_path,
        "killed",
        [step_node("0", "Items", {}, source=True), step_node("1", "Slow", {"sleep_s": 0})],
        [edge("0", "out", "1")],
    )
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        instance.event_log_storage.set_concurrency_slots("gpu", 1)

    def cli(sleep_s):
        return subprocess.Popen(
            [sys.executable, "-m", "dagster_graphbook.cli", "run", str(wf), "--custom-nodes",
             str(nodes), "--dagster-home", dagster_home, "--no-progress",
             "--set", f"Slow.sleep_s={sleep_s}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip

    first = cli(3600)
    try:
        lines = []
        for line in first.stdout:
            lines.append(line)
            if "LOADING" in line:
                break
        assert any("LOADING" in line for line in lines), "".join(lines)[-3000:]
        first.kill()  # kill -9 of the run's process only, as the OOM killer does
        first.communicate(timeout=30)
        second = cli(0)
        try:
            out, _ = second.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            out = "(the second run still waits 90 s later)"
    finally:
        for proc in (first, locals().get("second")):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert second.returncode == 0, out[-3000:]
    assert "marked it failed" in out
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        runs = {r.status: r for r in instance.get_runs()}
        assert set(runs) == {dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.SUCCESS}
        killed = runs[dg.DagsterRunStatus.FAILURE]
        failure = instance.all_logs(killed.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert "is gone: killed" in failure[-1].dagster_event.message
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []


LATE_WORKER = """
import os, sys, time
from dagster_graphbook.execution.pools.loader.worker import WorkerInit as _WorkerInit

init = _WorkerInit("1", "Load")  # made in the step process, as the loader pool does
pid = os.fork()
if pid == 0:  # the worker: starts up only after its step process was killed
    while os.getppid() == int(sys.argv[1]):
        time.sleep(0.01)
    init(0)
    open(sys.argv[2], "w").write(str(os.getpid()))
    time.sleep(60)
    os._exit(0)
print(pid, flush=True)
os.kill(os.getpid(), 9)  # the step process is killed while its worker starts
"""


def test_a_worker_that_starts_after_its_step_was_killed_exits(tmp_path):
    """Linux's parent-death signal only covers a parent alive when the worker asks for it: a
    worker forked just before its step process was killed lived on, an orphan."""
    survived = tmp_path / "survived"
    step = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.execv({sys.executable!r}, [{sys.executable!r}, "
         f"'-c', {LATE_WORKER!r}, str(os.getpid()), {str(survived)!r}])"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = int(step.stdout.readline())  # the worker keeps the pipe open: no communicate()
    step.wait(timeout=60)
    step.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(worker) and not survived.exists():
        time.sleep(0.05)
    running = _running(worker)
    if running:
        os.kill(worker, signal.SIGKILL)
    assert not survived.exists() and not running


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's new parent may not reap it at once)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_run_waiting_for_a_pool_slot_sleeps_and_ctrl_c_ends_it(tmp_path, dagster_home):
    """A run waiting for the ``gpu`` pool's one slot, held by a live run, sleeps between its
    claims (Dagster's in-process executor spun a core there) and, though Dagster delays SIGINT
    and SIGTERM to points inside steps, is marked failed and exits soon after the signal. The
    slot holder is untouched."""
    nodes = copy_nodes(tmp_path / "nodes", "killed_nodes.py", "signal_killed")
    wf = write_workflow(
        tmp_path,
        "waiting",
        [step_node("0", "Items", {}, source=True), step_node("1", "Slow", {"sleep_s": 0})],
        [edge("0", "out", "1")],
    )
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        instance.event_log_storage.set_concurrency_slots("gpu", 1)

    def cli(sleep_s):
        return subprocess.Popen(
            [sys.executable, "-m", "dagster_graphbook.cli", "run", str(wf), "--custom-nodes",
             str(nodes), "--dagster-home", dagster_home, "--no-progress",
             "--set", f"Slow.sleep_s={sleep_s}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip

    holder = cli(3600)
    waiter = None
    try:
        for line in holder.stdout:
            if "LOADING" in line:
                break
        waiter = cli(0)
        deadline = time.monotonic() + 120
        blocked = False
        while time.monotonic() < deadline and not blocked and waiter.poll() is None:
            time.sleep(0.5)
            with dg.DagsterInstance.from_config(dagster_home) as instance:
                info = instance.event_log_storage.get_concurrency_info("gpu")
                blocked = bool(info.pending_step_count)
        assert blocked, "the second run never waited for the pool"
        # waiting costs a few claims a second, not a core (a spinning run: 1 s or more here,
        # even on a loaded machine)
        waiting = psutil.Process(waiter.pid)
        before = sum(waiting.cpu_times()[:2])
        time.sleep(4)
        spent = sum(waiting.cpu_times()[:2]) - before
        assert spent < 0.6, f"the waiting run used {spent:.2f} s of CPU in 4 s"
        start = time.monotonic()
        waiter.send_signal(signal.SIGINT)
        try:
            out, _ = waiter.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            out = "(still waiting 45 s after SIGINT)"
        seconds = time.monotonic() - start
        assert holder.poll() is None  # the run holding the slot goes on
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert seconds < 30 and waiter.returncode == 130, f"{seconds:.0f} s\n{out[-3000:]}"
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        [run] = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.FAILURE]
        failure = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert "interrupted (SIGINT/SIGTERM)" in failure[-1].dagster_event.message


# --- Run ownership: a kernel lock, never tags -------------------------------------------------

PLAIN_DAGSTER_DEFS = """
from dagster_graphbook import GraphbookWorkflow, build_definitions

defs = build_definitions([GraphbookWorkflow({wf!r}, custom_nodes=[{nodes!r}])])
"""

RUN_WORKFLOW_SCRIPT = """
import json, sys
from dagster_graphbook import run_workflow

run = run_workflow(sys.argv[1], [sys.argv[2]], {{"Slow.sleep_s": float(sys.argv[4])}},
                   dagster_home=sys.argv[3], tags=json.loads(sys.argv[5]))
print("SUCCESS" if run.success else run.failure, flush=True)
"""


def _exited_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _owned_run_setup(tmp_path, dagster_home):
    nodes = copy_nodes(tmp_path / "nodes", "killed_nodes.py", "signal_killed")
    wf = write_workflow(
        tmp_path,
        "owned",
        [step_node("0", "Items", {}, source=True), step_node("1", "Slow", {"sleep_s": 0})],
        [edge("0", "out", "1")],
    )
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        instance.event_log_storage.set_concurrency_slots("gpu", 1)
    return nodes, wf


def _cli_run(wf, nodes, dagster_home, sleep_s, prefix=()):
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "dagster_graphbook.cli", "run", str(wf), "--custom-nodes",
         str(nodes), "--dagster-home", dagster_home, "--no-progress",
         "--set", f"Slow.sleep_s={sleep_s}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip


def _wait_for_loading(proc) -> str:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "LOADING" in line:
            return "".join(lines)
    raise AssertionError("the run never reached its batch step:\n" + "".join(lines)[-3000:])


def _batch_step_spans(instance, step_suffix="Slow"):
    """(start, end) timestamps of each run's batch step, by run id."""
    spans = {}
    for run in instance.get_runs():
        times = {}
        for record in instance.all_logs(run.run_id):
            event = record.dagster_event
            if event and record.step_key and record.step_key.endswith(step_suffix):
                if event.event_type == dg.DagsterEventType.STEP_START:
                    times["start"] = record.timestamp
                elif event.event_type in (
                    dg.DagsterEventType.STEP_SUCCESS,
                    dg.DagsterEventType.STEP_FAILURE,
                ):
                    times["end"] = record.timestamp
        spans[run.run_id] = (times.get("start"), times.get("end"))
    return spans


def _finish(*procs):
    outs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out = proc.communicate()[0] + "\n(killed after 120 s)"
        outs.append(out)
    return outs


@pytest.mark.parametrize("started_by", ["run_workflow", "plain_dagster"])
def test_forged_owner_tags_never_fail_a_live_run_or_free_its_gpu_slot(
    tmp_path, dagster_home, started_by
):
    """A live run tagged with this host and a dead pid (tags are user input: the Launchpad, a
    copy of an earlier run's tags) was marked FAILURE by the next CLI run, which then took the
    ``gpu`` slot and ran its batch step beside it. Now it is left alone: both succeed, one after
    the other on the one slot."""
    nodes, wf = _owned_run_setup(tmp_path, dagster_home)
    forged = {
        "dagster_graphbook/host": socket.gethostname(),
        "dagster_graphbook/pid": str(_exited_pid()),
        "dagster_graphbook/pid_start": "1",
    }
    env = {**os.environ, "DAGSTER_HOME": dagster_home}
    if started_by == "run_workflow":
        cmd = [sys.executable, "-c", RUN_WORKFLOW_SCRIPT.format(), str(wf), str(nodes),
               dagster_home, "1.5", json.dumps(forged)]  # fmt: skip
    else:  # what a run worker does: the job's own executor, the tags as given
        defs = tmp_path / "defs.py"
        defs.write_text(PLAIN_DAGSTER_DEFS.format(wf=str(wf), nodes=str(nodes)))
        config = tmp_path / "config.yaml"
        config.write_text("ops:\n  owned__Slow:\n    config:\n      sleep_s: 1.5\n")
        cmd = [sys.executable, "-m", "dagster", "job", "execute", "-f", str(defs), "-j", "owned",
               "-c", str(config), "--tags", json.dumps(forged)]  # fmt: skip
    first = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        head = _wait_for_loading(first)
        second = _cli_run(wf, nodes, dagster_home, 0)
        out_first, out_second = _finish(first, second)
    finally:
        for proc in (first, locals().get("second")):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert second.returncode == 0, out_second[-3000:]
    assert first.returncode == 0, (head + out_first)[-3000:]
    assert "marked it failed" not in out_second
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        runs = instance.get_runs()
        assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS] * 2
        for run in runs:
            assert not instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        (s2, e2), (s1, e1) = [_batch_step_spans(instance)[r.run_id] for r in runs]
        assert None not in (s1, e1, s2, e2)
        assert e1 <= s2, "two runs' batch steps held the one gpu slot at once"
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []


@pytest.mark.skipif(
    subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                   capture_output=True).returncode != 0,
    reason="unshare --pid needs root (or user namespaces) on this machine",
)  # fmt: skip
def test_a_run_in_another_pid_namespace_is_not_judged_dead(tmp_path, dagster_home):
    """A run started inside ``unshare --pid`` (a pod's second container sharing DAGSTER_HOME) was
    tagged pid 1; the next run outside found that pid's start time wrong and marked it FAILURE
    while it ran, freeing its slot. The lock it holds is seen across namespaces."""
    nodes, wf = _owned_run_setup(tmp_path, dagster_home)
    first = _cli_run(wf, nodes, dagster_home, 1.5, ("unshare", "--pid", "--fork", "--mount-proc"))
    try:
        head = _wait_for_loading(first)
        second = _cli_run(wf, nodes, dagster_home, 0)
        out_first, out_second = _finish(first, second)
    finally:
        for proc in (first, locals().get("second")):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert first.returncode == 0, (head + out_first)[-3000:]
    assert second.returncode == 0, out_second[-3000:]
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        runs = instance.get_runs()
        assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS] * 2
        (s2, _), (_, e1) = [_batch_step_spans(instance)[r.run_id] for r in runs]
        assert e1 <= s2


def test_a_killed_run_worker_of_the_graphbook_executor_is_failed_by_the_next_run(
    tmp_path, dagster_home
):
    """A run executed by the job's own executor (as a Launchpad run worker does; here ``dagster
    job execute``) killed with all its processes stayed STARTED holding the ``gpu`` slot, so the
    next CLI run waited forever. The executor holds the run's owner lock: the next run fails it."""
    nodes, wf = _owned_run_setup(tmp_path, dagster_home)
    defs = tmp_path / "defs.py"
    defs.write_text(PLAIN_DAGSTER_DEFS.format(wf=str(wf), nodes=str(nodes)))
    config = tmp_path / "config.yaml"
    config.write_text("ops:\n  owned__Slow:\n    config:\n      sleep_s: 3600\n")
    env = {**os.environ, "DAGSTER_HOME": dagster_home}
    first = subprocess.Popen(
        [sys.executable, "-m", "dagster", "job", "execute", "-f", str(defs), "-j", "owned",
         "-c", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for_loading(first)
        os.killpg(first.pid, signal.SIGKILL)  # the run worker and its loader workers
        first.communicate(timeout=30)
        second = _cli_run(wf, nodes, dagster_home, 0)
        (out,) = _finish(second)
    finally:
        for proc in (first, locals().get("second")):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert second.returncode == 0, out[-3000:]
    assert "marked it failed" in out
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        statuses = sorted(r.status.value for r in instance.get_runs())
        assert statuses == ["FAILURE", "SUCCESS"]
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []


RUN_MULTIPROCESS = """
import sys
from dagster_graphbook import run_workflow

if __name__ == "__main__":
    run_workflow(sys.argv[1], [sys.argv[2]], dagster_home=sys.argv[3], executor="multiprocess")
"""


def test_a_step_process_starting_when_its_coordinator_is_killed_does_not_run_once_judged_dead(
    tmp_path, dagster_home
):
    """A multiprocess run's coordinator killed while a step process loads its model (before the
    step joins the run's lock): the next run finds the lock free, marks the run failed and frees
    its ``gpu`` slot. The step process must not go on to do its batch work beside the run that
    takes the slot (it did, and materialized into the failed run)."""
    from dagster_graphbook.execution.ownership.dead_runs import fail_dead_runs

    nodes = copy_nodes(tmp_path / "nodes", "model_nodes.py", "signal_model_loading")
    marker = tmp_path / "infer"
    wf = write_workflow(
        tmp_path,
        "window",
        [
            step_node("0", "Items", {}, source=True),
            step_node("1", "Infer", {"marker": str(marker)}),
            {"id": "2", "type": "resource", "position": {"x": 0, "y": 0},
             "data": {"name": "Model", "category": "", "parameters": {
                 "load_s": {"type": "number", "value": 8},
                 "marker": {"type": "string", "value": str(marker)}}}},
        ],
        [edge("0", "out", "1"), edge("2", "resource", "1", "model")],
    )  # fmt: skip
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        instance.event_log_storage.set_concurrency_slots("gpu", 1)
    script = tmp_path / "run_mp.py"
    script.write_text(RUN_MULTIPROCESS)
    coordinator = subprocess.Popen(
        [sys.executable, str(script), str(wf), str(nodes), dagster_home],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    loading = marker.with_name("infer.loading")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not loading.exists() and coordinator.poll() is None:
            time.sleep(0.1)
        assert loading.exists(), "the step process never started loading its model"
        time.sleep(0.2)
        step_pid = int(loading.read_text())
        coordinator.kill()  # kill -9 of the coordinator only: its step process lives on
        coordinator.wait(timeout=30)
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            judged = fail_dead_runs(instance)  # what the next run does before it starts
            freed = instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and _running(step_pid):
            time.sleep(0.2)
        assert not _running(step_pid), "the step process is still running 90 s later"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the step process, if it is left
            os.killpg(coordinator.pid, signal.SIGKILL)
    ran = marker.with_name("infer.ran")
    assert not (judged and freed and ran.exists()), (
        "the run was marked failed and its gpu slot freed, then its step did its batch work"
    )
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        fail_dead_runs(instance)  # the step process is gone now: the run is dead for sure
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.FAILURE
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []


SWEEPER_KILLED_BETWEEN_WRITES = """
import os, signal, sys
import dagster as dg
from dagster_graphbook.execution.ownership.dead_runs import fail_dead_runs

with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
    storage, done = instance.event_log_storage, []

    def second_write_dies(real):
        def call(*args, **kwargs):
            if done:  # killed (kill -9, OOM) after its first write, before its second
                os.kill(os.getpid(), signal.SIGKILL)
            done.append(real)
            return real(*args, **kwargs)
        return call

    instance.report_run_failed = second_write_dies(instance.report_run_failed)
    storage.free_concurrency_slots_for_run = second_write_dies(
        storage.free_concurrency_slots_for_run
    )
    fail_dead_runs(instance)
"""


def test_a_sweeper_killed_between_failing_a_run_and_freeing_its_slot_leaves_no_slot_claimed(
    tmp_path, dagster_home
):
    """The process sweeping dead runs killed between its two writes (mark the run failed, free
    its slots): the slot stayed claimed by a FAILURE run for good (its lock file removed by the
    next sweep), so every later ``gpu`` run waited forever."""
    from dagster_graphbook.execution.ownership.dead_runs import fail_dead_runs

    nodes, wf = _owned_run_setup(tmp_path, dagster_home)
    first = _cli_run(wf, nodes, dagster_home, 3600)
    try:
        _wait_for_loading(first)
        first.kill()
        first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    sweeper = subprocess.run(
        [sys.executable, "-c", SWEEPER_KILLED_BETWEEN_WRITES, dagster_home],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert sweeper.returncode == -signal.SIGKILL, sweeper.stderr[-3000:]
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        fail_dead_runs(instance)  # the next run's sweep
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.FAILURE
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []


def test_a_run_worker_of_a_ui_launch_killed_frees_its_slot_for_the_next_cli_run(tmp_path):
    """A run launched from the UI (a real webserver and code server) whose run worker is killed
    with kill -9 inside its batch step: Dagster's code server marks the run failed but leaves its
    ``gpu`` slot claimed, and the next CLI run's sweep, finding the run already finished, only
    removed its lock file: that run (and every later one) waited for the slot forever."""
    home = tmp_path / "home"
    home.mkdir()
    nodes, wf = _owned_run_setup(tmp_path, str(home))
    (tmp_path / "defs.py").write_text(PLAIN_DAGSTER_DEFS.format(wf=str(wf), nodes=str(nodes)))
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_file:\n      relative_path: defs.py\n"
        "      location_name: graphbook\n"
    )
    second = None
    try:
        with serve_webserver(workspace, home) as server:
            run_id = server.launch("owned", {"ops": {"owned__Slow": {"config": {"sleep_s": 3600}}}})
            lock = home / ".graphbook" / "run-owners" / f"{run_id}.lock"
            with dg.DagsterInstance.from_config(str(home)) as instance:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    claimed = instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
                    if claimed and lock.exists():
                        break
                    time.sleep(0.2)
                assert claimed and lock.exists(), "the run never reached its batch step"
                os.kill(json.loads(lock.read_text())["pid"], signal.SIGKILL)  # the run worker
                while time.monotonic() < deadline:  # the code server notices its worker died
                    if instance.get_run_by_id(run_id).is_finished:
                        break
                    time.sleep(0.2)
                assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
            second = _cli_run(wf, nodes, str(home), 0)
            (out,) = _finish(second)
    finally:
        if second is not None and second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert second.returncode == 0, out[-3000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []


@pytest.mark.skipif(
    subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode != 0,
    reason="unshare --mount needs root (or user namespaces) on this machine",
)
def test_a_read_only_run_owners_folder_does_not_stop_runs(tmp_path, dagster_home):
    """An instance folder whose ``.graphbook/run-owners`` cannot be written (a read-only mount, a
    read-only root file system with the instance's storage elsewhere) ended every run before
    its first step with ``OSError: Read-only file system`` and a traceback. The run goes on, and
    a warning names the folder and what is lost (a killed run is not failed automatically)."""
    nodes, wf = _owned_run_setup(tmp_path, dagster_home)
    owners = os.path.join(dagster_home, ".graphbook", "run-owners")
    os.makedirs(owners)
    cli = [sys.executable, "-m", "dagster_graphbook.cli", "run", str(wf), "--custom-nodes",
           str(nodes), "--dagster-home", dagster_home, "--no-progress"]  # fmt: skip
    script = (
        f'mount --bind "{owners}" "{owners}" && mount -o remount,bind,ro "{owners}" && '
        f'! touch "{owners}/probe" 2>/dev/null && exec "$@"'
    )
    proc = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, "sh", *cli],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out and owners in out, out[-3000:]
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        assert [r.status for r in instance.get_runs()] == [dg.DagsterRunStatus.SUCCESS]


RUN_MULTIPROCESS_SLOW = """
import sys
from dagster_graphbook import run_workflow

if __name__ == "__main__":
    run_workflow(sys.argv[1], [sys.argv[2]], {"Slow.sleep_s": float(sys.argv[4])},
                 dagster_home=sys.argv[3], executor="multiprocess", quiet=False)
"""


def test_a_run_waiting_for_the_slot_of_a_run_whose_orphaned_step_ends_goes_on(
    tmp_path, dagster_home
):
    """A multiprocess run's coordinator killed while its batch step's process works on: the next
    run rightly leaves it alone (its step is alive) and waits for the ``gpu`` slot. When the
    orphaned step ends, every process of the dead run is gone, but the waiting run had judged
    the dead runs only once, at its start: it waited for the slot forever."""
    nodes, wf = _owned_run_setup(tmp_path, dagster_home)
    script = tmp_path / "run_mp.py"
    script.write_text(RUN_MULTIPROCESS_SLOW)
    first = subprocess.Popen(
        [sys.executable, str(script), str(wf), str(nodes), dagster_home, "8"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    second = None
    try:
        _wait_for_loading(first)  # printed by the step process
        first.kill()  # the coordinator only
        first.wait(timeout=30)
        second = _cli_run(wf, nodes, dagster_home, 0)
        (out,) = _finish(second)  # the orphaned step ends some 8 s after the kill
    finally:
        for proc in (first, second):
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
    assert second.returncode == 0, out[-3000:]
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        statuses = sorted(r.status.value for r in instance.get_runs())
        assert statuses == ["FAILURE", "SUCCESS"]
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []


RUN_SHARDED_SLOW = """
import sys
from dagster_graphbook import run_workflow

if __name__ == "__main__":
    params = {"Slow.sleep_s": 3, "Slow.runtime.num_workers": 0}
    run = run_workflow(sys.argv[1], [sys.argv[2]], params, dagster_home=sys.argv[3],
                       shards={"Slow": 2}, quiet=False)
    print("RUN", run.run_id, run.success, flush=True)
"""


def _owner_warnings(dagster_home, run_id, owners):
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        return [
            r.user_message
            for r in instance.all_logs(run_id)
            if r.level == 30 and owners in (r.user_message or "")
        ]


def test_a_run_owners_folder_turned_read_only_under_a_sharded_run_leaves_it_unowned(
    tmp_path, dagster_home
):
    """The run-owners folder made read-only while a sharded run (multiprocess, a process per
    shard and for the commit) is in a shard: the steps that start later could not open the
    run's lock read-write and failed (retried, failed again), and the coordinator's final unlink
    raised. The run goes on unowned and succeeds, each step saying so; the lock file left
    behind is removed by the next run once the folder is writable again."""
    if not can_make_read_only(tmp_path):
        pytest.skip("root here may not mount (no CAP_SYS_ADMIN)")
    nodes = copy_nodes(tmp_path / "nodes", "shard_nodes.py", "signal_shards")
    wf = write_workflow(
        tmp_path,
        "sharded",
        [step_node("0", "Items", {}, source=True), step_node("1", "Slow", {"sleep_s": 0})],
        [edge("0", "out", "1")],
    )
    script = tmp_path / "run_sharded.py"
    script.write_text(RUN_SHARDED_SLOW)
    owners = os.path.join(dagster_home, ".graphbook", "run-owners")
    with read_only_switch(owners) as (freeze, thaw):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(wf), str(nodes), dagster_home],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            seen = _wait_for_loading(proc)  # a shard's process is at work
            freeze()
            (out,) = _finish(proc)
            out = seen + out
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        assert proc.returncode == 0, out[-4000:]
        run_id = next(line.split()[1] for line in out.splitlines() if line.startswith("RUN "))
        assert f"RUN {run_id} True" in out, out[-4000:]
        assert "Traceback" not in out, out[-4000:]
        said = _owner_warnings(dagster_home, run_id, owners)
        assert any("goes on unowned" in m for m in said), said  # a step that started later
        assert os.listdir(owners) == [f"{run_id}.lock"]  # could not be removed
        thaw()
        again = _cli_run(wf, nodes, dagster_home, 0)
        (out,) = _finish(again)
    assert again.returncode == 0, out[-3000:]
    assert os.listdir(owners) == []  # the next run's sweep removed the file left behind
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        assert [r.status for r in instance.get_runs()] == [dg.DagsterRunStatus.SUCCESS] * 2


def test_a_run_owners_folder_turned_read_only_under_an_in_process_run_ends_it_cleanly(
    tmp_path, dagster_home
):
    """The folder made read-only while an in-process run (``dagster-graphbook run``, through
    ``run_workflow``) is in its batch step: the run was SUCCESS in the instance, but its final
    unlink of the lock raised, a traceback and exit status 1. It exits 0 with a warning naming
    the folder; the file left behind is removed by the next run once the folder is writable,
    and that run does not judge the finished run dead."""
    if not can_make_read_only(tmp_path):
        pytest.skip("root here may not mount (no CAP_SYS_ADMIN)")
    nodes, wf = _owned_run_setup(tmp_path, dagster_home)
    owners = os.path.join(dagster_home, ".graphbook", "run-owners")
    with read_only_switch(owners) as (freeze, thaw):
        first = _cli_run(wf, nodes, dagster_home, 3)
        try:
            seen = _wait_for_loading(first)
            freeze()
            (out,) = _finish(first)
            out = seen + out
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.pid, signal.SIGKILL)
        assert first.returncode == 0, out[-3000:]
        assert "Traceback" not in out and "could not remove the owner lock" in out, out[-3000:]
        assert owners in out, out[-3000:]
        (left,) = os.listdir(owners)
        thaw()
        second = _cli_run(wf, nodes, dagster_home, 0)
        (out,) = _finish(second)
    assert second.returncode == 0, out[-3000:]
    assert left not in os.listdir(owners) and os.listdir(owners) == []
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        assert [r.status for r in instance.get_runs()] == [dg.DagsterRunStatus.SUCCESS] * 2
