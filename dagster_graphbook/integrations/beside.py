"""Steps run beside the run worker: each in a process forked from this process's forkserver,
which imported this package, torch and Dagster's storage once (``defs.executor.PRELOAD``), as
``graphbook_executor``'s multiprocess mode does on one box.

The Ray executor (``integrations/ray.py``) runs here the steps that ask the cluster for nothing
(a source listing, a sharded step's plan and commit): a Ray job costs a process that starts
Python and imports Dagster, torch and the code location (about 5 s each on a 2-core machine),
where a fork from the preloaded server starts in a fraction of a second. A forked step does what
a Ray job's ``dagster api execute_step`` does, with the same arguments: it writes its events to
the instance, which the run worker's executor reads, so retries, failures and the run's end are
Dagster's as for a Ray job.

A forked step is known by its own pid (and start time), not by the forkserver's report: with
the forkserver gone (killed), ``Process.exitcode`` reads 255 while the step runs on. Stopping a
step escalates, as ``ray job stop`` does: SIGINT (Dagster's step interrupt), SIGTERM after
``INTERRUPT_GRACE_S``, SIGKILL ``TERM_GRACE_S`` later, in a thread of its own; steps still alive
when the run worker ends (``ForkedSteps.end``, at exit too) are stopped so, and waited for.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
from multiprocessing import forkserver, get_context
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import dagster as dg

from ..dagster_internals import CheckStepHealthResult, StepHandlerContext

# the metadata key of a forked step's STEP_WORKER_STARTING event (a Ray job's has dagster-ray's
# "Ray Submission ID"): where it ran, "<host>, run worker pid <pid>"
BESIDE_META = "Beside the run worker"
INTERRUPT_GRACE_S = 10.0  # after a step's SIGINT, before its SIGTERM
TERM_GRACE_S = 5.0  # after its SIGTERM, before its SIGKILL
END_GRACE_S = 2.0  # for a step still ending when the run worker does, before its SIGINT
_PROC = os.path.isdir("/proc/self")


def _started(pid: int) -> Optional[bytes]:
    """When process ``pid`` started (its /proc stat's start time: a pid used again later has
    another), None once it ended (gone, or a zombie not reaped yet); b"" without /proc, where
    ``os.kill(pid, 0)`` tells only whether it is there."""
    if not _PROC:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return b""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in (b"Z", b"X") else fields[19]


class Forked:
    """A step's forked process, judged by its own pid: ``process`` (multiprocessing's) only
    gives its exit status, which the forkserver reports."""

    def __init__(self, process: BaseProcess) -> None:
        self.process = process
        self.pid: int = process.pid or 0
        self.started = _started(self.pid) if self.pid else None  # (pid 0: its whole group)
        self.stopping: Optional[threading.Thread] = None

    def alive(self) -> bool:
        return self.started is not None and _started(self.pid) == self.started

    def unhealthy(self, key: str) -> Optional[str]:
        """Why the step's process failed, None while it runs or when it ended well (its events
        tell the rest) or its status is not in yet."""
        if self.alive():
            return None
        code = self.process.exitcode
        if not code:
            return None
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        if code == 255:  # what a lost forkserver reads as too
            how += " (or its forkserver ended first, its status unknown)"
        where = f"forked beside the run worker (pid {self.pid})"
        return f"the process of step {key}, {where}, ended with {how}"

    def stop(
        self, graces: Sequence[float] = (INTERRUPT_GRACE_S, TERM_GRACE_S), wait_s: float = 0.0
    ) -> None:
        """Stop the process in a thread (once): wait ``wait_s`` for it to end, then SIGINT,
        SIGTERM and SIGKILL, each ``graces`` apart, while it lives on."""
        if self.stopping is None:
            steps = [(None, wait_s), (signal.SIGINT, graces[0]), (signal.SIGTERM, graces[1])]
            self.stopping = threading.Thread(
                target=self._stop, args=(steps,), name=f"stopping pid {self.pid}", daemon=True
            )
            self.stopping.start()

    def _stop(self, steps: Sequence[Tuple[Optional[int], float]]) -> None:
        for signum, grace in [*steps, (signal.SIGKILL, 1.0)]:  # 1 s: its end seen
            if signum is not None and self.alive():
                try:
                    os.kill(self.pid, signum)
                except ProcessLookupError:
                    return
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if not self.alive():
                return


def _run_step(env: Mapping[str, str]) -> None:
    """A forked step's process: ``dagster api execute_step`` with the step's arguments (in
    ``env``, as a Ray job's entrypoint gets them), in the step's environment."""
    os.environ.update(env)
    for path in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
        if path and path not in sys.path:  # a Ray job's PYTHONPATH, read at its start
            sys.path.insert(0, path)
    from dagster._cli.api import execute_step_command

    callback: Any = execute_step_command.callback
    callback(None, env["DAGSTER_COMPRESSED_EXECUTE_STEP_ARGS"])


class ForkedSteps:
    """Launches, checks and stops steps in processes forked beside the run worker; ``env``: the
    variables the Ray executor gives its jobs (``env_vars``, ``runtime_env``'s), given to these
    processes too."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self._processes: Dict[Tuple[str, str], Forked] = {}
        self._server_ready = False
        self._lock = threading.Lock()
        self._preload: List[str] = []
        self.graces = (INTERRUPT_GRACE_S, TERM_GRACE_S)  # SIGINT's, then SIGTERM's
        atexit.register(self.end)  # where the executor's end did not (an exception, a signal)

    def warm_up(self, instance: dg.DagsterInstance) -> None:
        """Start the forkserver now, in a thread, while the run starts: it imports torch and the
        rest once (seconds), which the run's first step beside the run worker would wait for.
        The instance's storage modules (dagster-postgres) are preloaded too: each step opens
        it."""
        for storage in (instance.run_storage, instance.event_log_storage):
            self._preload.append(type(storage).__module__)
        threading.Thread(target=self._start_server, name="forkserver warm-up", daemon=True).start()

    def _start_server(self) -> None:
        self._context()
        forkserver.ensure_running()

    def _context(self) -> Any:
        from ..defs.executor import (
            PRELOAD,
            forkserver_with_this_environment,
            resource_tracker_of_its_own,
        )

        context = get_context("forkserver")
        with self._lock:
            if not self._server_ready:  # as graphbook_executor's multiprocess mode, once a run
                resource_tracker_of_its_own()
                forkserver_with_this_environment()
                context.set_forkserver_preload([*PRELOAD, *self._preload])
                self._server_ready = True
        return context

    def launch(self, ctx: StepHandlerContext, key: str) -> Iterator[dg.DagsterEvent]:
        args = ctx.execute_step_args
        where = f"{socket.gethostname()}, run worker pid {os.getpid()}"
        yield dg.DagsterEvent.step_worker_starting(
            ctx.get_step_context(key),
            message=(
                f'Executing step "{key}" in a process forked beside the run worker ({where}): '
                "it asks the Ray cluster for nothing"
            ),
            metadata={BESIDE_META: dg.MetadataValue.text(where)},
        )
        env = {  # what dagster-ray gives a step's Ray job
            "DAGSTER_RUN_JOB_NAME": ctx.dagster_run.job_name,
            "DAGSTER_RUN_STEP_KEY": key,
            **{e["name"]: e["value"] for e in args.get_command_env()},
            **self.env,
        }
        self._processes[(args.run_id, key)] = self.fork(_run_step, (env,), f"step {key}")

    def fork(self, target: Callable[..., None], args: Tuple[Any, ...], name: str) -> Forked:
        """``target(*args)`` in a process forked from the forkserver."""
        process = self._context().Process(target=target, args=args, name=name)
        process.start()
        return Forked(process)

    def health(self, ctx: StepHandlerContext, key: str) -> CheckStepHealthResult:
        step = self._processes.get((ctx.execute_step_args.run_id, key))
        if step is None:  # a run resumed by another run worker: run it again
            return CheckStepHealthResult.unhealthy(
                reason=f"step {key} ran beside another run worker: no process of it here"
            )
        reason = step.unhealthy(key)
        if reason is None:
            return CheckStepHealthResult.healthy()
        return CheckStepHealthResult.unhealthy(reason=reason)

    def terminate(self, ctx: StepHandlerContext, key: str) -> Iterator[dg.DagsterEvent]:
        step = self._processes.get((ctx.execute_step_args.run_id, key))
        if step is None or step.stopping is not None or not step.alive():
            return
        yield dg.DagsterEvent.engine_event(
            ctx.get_step_context(key),
            f"Interrupting the process of step {key} (pid {step.pid}), beside the run worker: "
            f"SIGTERM after {self.graces[0]:g} s, SIGKILL {self.graces[1]:g} s later if it "
            "runs on",
        )
        step.stop(self.graces)

    def end(self, wait_s: float = END_GRACE_S) -> None:
        """Stop the steps still alive (each given ``wait_s`` to end first, as one ending with
        the run does) and wait for all stopping: none outlives the run worker's executor."""
        steps = [step for step in self._processes.values() if step.stopping or step.alive()]
        for step in steps:
            step.stop(self.graces, wait_s)
        for step in steps:
            if step.stopping is not None:
                step.stopping.join()
