"""Runs whose process was killed (``kill -9``, the OOM killer) while they were in progress.

A run executed in a process of ours (``dagster-graphbook run/materialize``, ``run_workflow``,
``run_job``) has no run launcher and no daemon watching it: killed, it stays STARTED in the
instance forever. It then holds its concurrency slots (a ``gpu`` pool limited to 1 made every
later batch run wait forever), later runs warn about it as a run in progress, and retention never
prunes its notes. Each such run is tagged with its host, pid and the pid's start time; before a
new run starts, runs of this host whose process is gone are marked failed and their slots freed.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Dict, List, Optional

import dagster as dg

HOST_TAG = "dagster_graphbook/host"
PID_TAG = "dagster_graphbook/pid"
PID_START_TAG = "dagster_graphbook/pid_start"
_IN_PROGRESS = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def _stat(pid: int) -> Optional[List[str]]:
    """The fields of ``/proc/<pid>/stat`` after the name (Linux), None without it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().decode(errors="replace").rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _pid_start(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (Linux), so a reused pid is told apart."""
    stat = _stat(pid)
    return stat[19] if stat else None  # field 22 of stat, counted after the name


def owner_tags() -> Dict[str, str]:
    """Tags naming the process that executes a run started here."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    start = _pid_start(os.getpid())
    if start is not None:
        tags[PID_START_TAG] = start
    return tags


def _alive(pid: int, start: Optional[str]) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    stat = _stat(pid)
    if stat is None:
        return True  # no /proc: the kernel said it exists
    return stat[0] != "Z" and (start is None or stat[19] == start)  # a zombie is dead


def is_dead(run: dg.DagsterRun) -> bool:
    """A run in progress whose executing process on this host is gone."""
    tags = run.tags or {}
    if run.is_finished or tags.get(HOST_TAG) != socket.gethostname():
        return False
    pid = tags.get(PID_TAG, "")
    return pid.isdigit() and not _alive(int(pid), tags.get(PID_START_TAG))


def fail_dead_runs(instance: dg.DagsterInstance) -> List[str]:
    """Mark the runs of this host whose process died as failed and free their concurrency slots;
    returns their ids."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(statuses=_IN_PROGRESS, tags={HOST_TAG: socket.gethostname()})
    )
    failed = []
    for run in runs:
        if not is_dead(run):
            continue
        instance.report_run_failed(
            run,
            f"the process running it (pid {run.tags[PID_TAG]} on {run.tags[HOST_TAG]}) is gone: "
            "killed (kill -9, out of memory) while the run was in progress; marked failed by "
            "dagster-graphbook before the next run",
        )
        storage = instance.event_log_storage
        if storage.supports_global_concurrency_limits:
            storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(run.run_id)
    return failed


class InterruptBackstop:
    """Ends a run that ignores SIGINT/SIGTERM: Dagster delays signals to points inside steps, so
    a run waiting for a pool slot (``dagster instance concurrency set gpu 1``, held by another
    run) kept waiting, at full CPU, through every Ctrl-C and SIGTERM. ``grace_s`` after a signal
    that the run did not act on, it is marked failed, its slot claims freed, and the process
    exits with status 130."""

    def __init__(self, instance: dg.DagsterInstance, token_tag: str, token: str, grace_s: float):
        self.instance, self.tags, self.grace_s = instance, {token_tag: token}, grace_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="graphbook-interrupt", daemon=True)

    def __enter__(self) -> InterruptBackstop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()

    def _watch(self) -> None:
        from dagster._utils.interrupts import check_captured_interrupt

        since: Optional[float] = None
        while not self.done.wait(0.5):
            if not check_captured_interrupt():
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= self.grace_s:
                self._stop()

    def _stop(self) -> None:
        runs = self.instance.get_runs(filters=dg.RunsFilter(tags=self.tags), limit=1)
        for run in runs:
            if run.is_finished:
                return
            self.instance.report_run_failed(
                run,
                f"interrupted (SIGINT/SIGTERM) and still not ended {self.grace_s:g} s later "
                "(waiting for a pool's concurrency slot?); stopped by dagster-graphbook",
            )
            storage = self.instance.event_log_storage
            if storage.supports_global_concurrency_limits:
                storage.free_concurrency_slots_for_run(run.run_id)
        if self.done.is_set():
            return
        print(
            f"interrupted, and the run did not stop within {self.grace_s:g} s: marked it failed; "
            "exiting",
            file=sys.stderr,
            flush=True,
        )
        os._exit(130)
