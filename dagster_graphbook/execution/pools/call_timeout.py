"""A per-call time limit for ``load_fn`` and ``dump_fn`` (``runtime.call_timeout_s``).

A call stuck on a stalled network mount or a blocking read never returns on its own. In a worker
process (and in the step process's main thread) ``SIGALRM`` interrupts it: the blocking system
call returns EINTR, the handler raises ``CallTimeout`` inside the call, and the item fails like
any other bad item, with a traceback that shows where it was stuck. Threads cannot receive signals:
there the limit is not enforced and the stall watchdog (``stall.py``) reports the stuck call.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator, Optional

from ...errors import GraphbookError


class CallTimeout(GraphbookError):
    """A ``load_fn``/``dump_fn`` call ran past ``runtime.call_timeout_s`` (the item's error: the
    last line of its traceback)."""


def can_interrupt() -> bool:
    """Whether a time limit can be enforced here (the main thread of a process, on Unix)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: Optional[float], what: str) -> Iterator[None]:
    """Raise ``CallTimeout`` inside the block once it has run ``seconds`` (no limit for None/0)."""
    if not seconds or seconds <= 0 or not can_interrupt():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise CallTimeout(
            f"{what} did not return within {seconds:g} s (runtime.call_timeout_s); "
            "its traceback shows where it was stuck"
        )

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
