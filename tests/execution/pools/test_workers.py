"""``die_with_the_run``: a multiprocess run's step processes die with the run's process (a run
SIGKILLed by the OOM killer leaves no step running by itself), and an in-process run is left
alone, even in a process started from a thread that has ended. Real runs, real kills."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from tests.support.nodes import copy_nodes

_RUN_SCRIPT = """
import sys
from dagster_graphbook import run_workflow
run_workflow(sys.argv[1], custom_nodes=[sys.argv[2]], params={}, dagster_home=sys.argv[3],
             executor="multiprocess",
             run_config={"execution": {"config": {"multiprocess": %s}}})
"""


@pytest.mark.parametrize(
    "chosen", ["{}", "{'start_method': {'spawn': {}}}"], ids=["plain", "spawn"]
)
def test_step_processes_do_not_outlive_a_killed_launchpad_multiprocess_run(tmp_path, chosen):
    """The run's process is SIGKILLed (OOM killer) while its step runs: the step process (forked
    from the forkserver, not a child of the run's process) must not go on running by itself."""
    import subprocess
    import sys

    from tests.support.workflows import step_node, write_workflow

    nodes = copy_nodes(tmp_path / "nodes", "sleep_nodes.py", "sleeping_workers")
    out = tmp_path / "pid.txt"
    wf = write_workflow(
        tmp_path, "sleepy", [step_node("1", "Sleeper", {"out": str(out)}, source=True)], []
    )
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN_SCRIPT % chosen, str(wf), str(nodes), str(home)],
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    step_pid = None
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (out.exists() and out.read_text()):
            time.sleep(0.1)
        assert out.exists(), "the step never started"
        step_pid = int(out.read_text())
        proc.kill()
        proc.wait(5)
        deadline = time.monotonic() + 5
        while psutil.pid_exists(step_pid) and time.monotonic() < deadline:
            try:
                if psutil.Process(step_pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.1)
        alive = psutil.pid_exists(step_pid) and (
            psutil.Process(step_pid).status() != psutil.STATUS_ZOMBIE
        )
        assert not alive, f"step process {step_pid} outlived its killed run by 5 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        if step_pid and psutil.pid_exists(step_pid):
            try:
                os.kill(step_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _run_in_child(wf, nodes, home):
    from dagster_graphbook import run_workflow

    run = run_workflow(
        str(wf), custom_nodes=[str(nodes)], params={}, dagster_home=str(home), executor="in_process"
    )
    os._exit(0 if run.success else 3)


def test_an_in_process_run_in_a_process_started_from_a_thread_outlives_that_thread(tmp_path):
    """A job queue or web app starts each run in a ``multiprocessing.Process`` from a worker
    thread that then goes on (or ends). ``die_with_the_run`` (run_op) takes that launcher for a
    multiprocess run and sets the parent-death signal, which Linux sends when the *thread* that
    forked the process ends: the in-process run is SIGKILLed mid-step (exit code -9), though its
    launcher process is alive. Runs in process are meant to be left alone."""
    import multiprocessing

    from tests.support.workflows import step_node, write_workflow

    nodes = copy_nodes(tmp_path / "nodes", "slow_nodes.py", "slow_workers")
    out = tmp_path / "out.txt"
    wf = write_workflow(
        tmp_path, "slow", [step_node("1", "Slow", {"out": str(out)}, source=True)], []
    )
    home = tmp_path / "home"
    home.mkdir()
    procs = []

    def launcher():
        proc = multiprocessing.get_context("fork").Process(
            target=_run_in_child, args=(wf, nodes, home)
        )
        proc.start()
        procs.append(proc)
        deadline = time.monotonic() + 20
        while not os.path.exists(f"{out}.started") and time.monotonic() < deadline:
            time.sleep(0.05)
        # the thread ends here, while the run's step goes on

    thread = threading.Thread(target=launcher)
    thread.start()
    thread.join(30)
    proc = procs[0]
    proc.join(30)
    if proc.is_alive():
        proc.kill()
    assert os.path.exists(f"{out}.started"), "the run never started its step"
    assert proc.exitcode == 0, f"the run's process ended with {proc.exitcode}"
    assert out.read_text() == "done"
