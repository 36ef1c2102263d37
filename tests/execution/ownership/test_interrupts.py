"""A latch for termination signals while a stream runs: a terminate Python swallowed is raised
again."""

from __future__ import annotations

import os
import signal

import pytest


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_interrupt_latch_raises_a_terminate_that_python_swallowed():
    """Dagster's handler raises; raised inside ``__del__`` (or an at-fork hook, where the stream
    forks its pools) Python only prints it. The latch lets the loop raise it again."""
    from dagster_graphbook.execution.ownership.interrupts import interrupt_latch

    class Stop(Exception):
        pass

    def raising(signo, frame):
        raise Stop()

    class Swallows:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10_000):  # the handler runs here, where its exception is ignored
                pass

    old = signal.signal(signal.SIGTERM, raising)
    try:
        with interrupt_latch() as check:
            Swallows()
            with pytest.raises(Stop):
                check()
        assert signal.getsignal(signal.SIGTERM) is raising
    finally:
        signal.signal(signal.SIGTERM, old)
