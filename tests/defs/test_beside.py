"""The Ray executor's steps beside the run worker (``integrations/beside.py``): a forked step is
judged by its own pid, not by the forkserver's report of it, and stopping one escalates."""

import os
import signal
import time
from multiprocessing import forkserver

import pytest

from dagster_graphbook.integrations.beside import Forked, ForkedSteps

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forkserver needs fork")


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _stubborn(seconds: float) -> None:
    """A step stuck where SIGINT and SIGTERM do nothing (C code, a swallowed interrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(seconds)


def _exit(code: int) -> None:
    os._exit(code)


def _wait(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


@pytest.fixture
def steps():
    steps = ForkedSteps({})
    steps.graces = (0.3, 0.3)
    forked: list = []
    yield steps, forked
    for step in forked:  # none left behind, whatever the test did
        if step.alive():
            os.kill(step.pid, signal.SIGKILL)


def test_a_step_runs_on_while_its_forkserver_is_killed_and_can_still_be_stopped(steps):
    """The forkserver SIGKILLed: multiprocessing reads 255 for the step, which runs on; its
    health stays good, and stopping it still ends it (before: 'ended with exit code 255',
    Dagster retried it beside the orphan, which no terminate could reach)."""
    steps, forked = steps
    step = steps.fork(_sleep, (60,), "step sleeping")
    forked.append(step)
    assert step.alive() and step.unhealthy("s") is None
    server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    os.kill(server, signal.SIGKILL)
    assert _wait(lambda: step.process.exitcode is not None)
    assert step.process.exitcode == 255  # what multiprocessing says of it
    assert step.alive() and step.unhealthy("s") is None
    step.stop(steps.graces)
    assert _wait(lambda: not step.alive())
    assert step.unhealthy("s") is not None  # gone, its status unknown: not taken as a success
    assert "its forkserver ended first" in step.unhealthy("s")


def test_a_step_ignoring_sigint_and_sigterm_is_killed_after_the_graces(steps):
    steps, forked = steps
    step = steps.fork(_stubborn, (60,), "step stubborn")
    forked.append(step)
    time.sleep(0.5)  # its handlers set
    began = time.monotonic()
    step.stop(steps.graces)
    assert step.stopping is not None
    step.stopping.join(10)
    assert not step.alive()
    assert 0.5 < time.monotonic() - began < 5  # SIGINT, 0.3 s, SIGTERM, 0.3 s, SIGKILL
    assert _wait(lambda: step.process.exitcode is not None)
    assert step.process.exitcode == -signal.SIGKILL
    assert "signal 9" in step.unhealthy("s")


def test_a_step_ended_well_or_badly_reads_so_and_end_stops_those_left(steps):
    """Exit 0 is healthy (its events tell the rest), another code is not; ``end`` (the run
    worker's end) stops what still runs, a step ending on its own given its time first."""
    steps, forked = steps
    good, bad = steps.fork(_exit, (0,), "good"), steps.fork(_exit, (3,), "bad")
    left = steps.fork(_sleep, (60,), "left")
    forked += [good, bad, left]
    assert _wait(lambda: bad.process.exitcode is not None and good.process.exitcode is not None)
    assert good.unhealthy("g") is None and not good.alive()
    assert "exit code 3" in bad.unhealthy("b")
    steps._processes.update({("r", "g"): good, ("r", "b"): bad, ("r", "l"): left})
    began = time.monotonic()
    steps.end(wait_s=0.1)
    assert not left.alive() and time.monotonic() - began < 5
    assert good.stopping is None and bad.stopping is None  # nothing sent to the ended


def test_a_pid_used_again_is_not_the_step():
    """The start time tells a pid's later process from the step's."""

    class _Process:
        pid = os.getpid()
        exitcode = None

    me = Forked(_Process())  # type: ignore[arg-type]
    assert me.alive()
    me.started = b"0"
    assert not me.alive()
