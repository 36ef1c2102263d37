"""Ending thread pools whose threads may be stuck for good.

A thread blocked in C code (``time.sleep``, a read on a network mount that stopped answering)
cannot be interrupted or killed. ``ThreadPoolExecutor.shutdown(wait=True)`` would then wait
forever, so a failed or interrupted step would never end. Here the pool is shut down without
waiting, the threads get a short grace, and any still running are reported by
``stuck_threads()`` and let go of: the interpreter no longer waits for them at exit, so a process
whose step was interrupted (a run worker after the UI's Terminate, ``dagster job execute`` after
SIGTERM) ends instead of hanging at exit.
"""

from __future__ import annotations

import concurrent.futures.thread as futures_thread
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, List, Optional

GRACE_S = 2.0
_PREFIXES = ("graphbook-load", "graphbook-dump")


def shut_down_threads(
    pool: ThreadPoolExecutor, prefix: str, grace_s: Optional[float] = None
) -> None:
    """Cancel queued calls, let running ones finish within ``grace_s``, then stop waiting."""
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + (GRACE_S if grace_s is None else grace_s)
    for thread in [t for t in threading.enumerate() if t.name.startswith(prefix)]:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            _let_go(thread)


def _let_go(thread: threading.Thread) -> None:
    """Stop the interpreter from joining ``thread`` at exit (CPython 3.10-3.12 internals: the
    executors' exit hook joins every pool thread, ``threading._shutdown`` every non-daemon one).
    ``tests/e2e/test_integrity_signals.py`` fails where these internals differ."""
    getattr(futures_thread, "_threads_queues", {}).pop(thread, None)
    locks = getattr(threading, "_shutdown_locks", None)
    lock = getattr(thread, "_tstate_lock", None)
    if locks is not None and lock is not None:
        with threading._shutdown_locks_lock:  # type: ignore[attr-defined]
            locks.discard(lock)


def stuck_threads() -> List[str]:
    """Names of load/dump threads still running (stuck in a call that never returned)."""
    return [t.name for t in threading.enumerate() if t.name.startswith(_PREFIXES) and t.is_alive()]


def pool_processes(pool: ProcessPoolExecutor) -> List[Any]:
    """The worker processes of a ``ProcessPoolExecutor`` (``multiprocessing.Process``), which it
    keeps privately (CPython 3.8-3.13: ``_processes``, pid -> process); none once it forgot them.
    ``tests/e2e/test_reliability_faults.py`` fails where this differs."""
    return list((getattr(pool, "_processes", None) or {}).values())


def pool_thread_ids(pool: ThreadPoolExecutor) -> List[int]:
    """Native ids of a ``ThreadPoolExecutor``'s threads (CPython keeps them in ``_threads``)."""
    return [t.native_id for t in getattr(pool, "_threads", ()) if t.native_id is not None]
