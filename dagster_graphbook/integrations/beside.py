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
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from multiprocessing import forkserver, get_context
from multiprocessing.process import BaseProcess
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import dagster as dg

from ..dagster_internals import CheckStepHealthResult, StepHandlerContext

# the metadata key of a forked step's STEP_WORKER_STARTING event (a Ray job's has dagster-ray's
# "Ray Submission ID"): where it ran, "<host>, run worker pid <pid>"
BESIDE_META = "Beside the run worker"


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
        self._processes: Dict[Tuple[str, str], BaseProcess] = {}
        self._server_ready = False
        self._lock = threading.Lock()
        self._preload: List[str] = []

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
        process = self._context().Process(target=_run_step, args=(env,), name=f"step {key}")
        process.start()
        self._processes[(args.run_id, key)] = process

    def health(self, ctx: StepHandlerContext, key: str) -> CheckStepHealthResult:
        process = self._processes.get((ctx.execute_step_args.run_id, key))
        if process is None:  # a run resumed by another run worker: run it again
            return CheckStepHealthResult.unhealthy(
                reason=f"step {key} ran beside another run worker: no process of it here"
            )
        code = process.exitcode
        if not code:  # running, or ended well (its events tell the rest)
            return CheckStepHealthResult.healthy()
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return CheckStepHealthResult.unhealthy(
            reason=(
                f"the process of step {key}, forked beside the run worker (pid {process.pid}), "
                f"ended with {how}"
            )
        )

    def terminate(self, ctx: StepHandlerContext, key: str) -> Iterator[dg.DagsterEvent]:
        process = self._processes.get((ctx.execute_step_args.run_id, key))
        if process is None or process.exitcode is not None or process.pid is None:
            return
        yield dg.DagsterEvent.engine_event(
            ctx.get_step_context(key),
            f"Interrupting the process of step {key} (pid {process.pid}), beside the run worker",
        )
        try:
            os.kill(process.pid, signal.SIGINT)  # Dagster's step interrupt, as the CLI's
        except ProcessLookupError:
            pass
