"""A latch for termination signals while a stream runs.

Dagster stops a step by raising from its SIGINT/SIGTERM handler. Python ignores an exception
raised where it cannot propagate (at-fork hooks, ``__del__``, logging's lock release), and a
stream forks loader and dump workers for every chunk, so a terminate could land there and be
lost: the run would go on. The latch remembers the signal and the loop raises it again.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupt_latch() -> Iterator[Callable[[], None]]:
    """Yields ``check()``, which re-raises a signal received since the latch was set."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None  # only the main thread receives signals
        return
    originals: Dict[int, Any] = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    seen: List[int] = []

    def deliver(signo: int, frame: Any) -> None:
        original = originals.get(signo)
        if callable(original):
            original(signo, frame)
        elif original == signal.SIG_DFL:
            signal.signal(signo, signal.SIG_DFL)
            os.kill(os.getpid(), signo)

    def handler(signo: int, frame: Any) -> None:
        seen.append(signo)
        deliver(signo, frame)

    def check() -> None:
        if seen:
            deliver(seen[-1], None)

    for sig in _SIGNALS:
        signal.signal(sig, handler)
    try:
        yield check
    finally:
        for signo, original in originals.items():
            signal.signal(signo, original if original is not None else signal.SIG_DFL)
