"""The ``torch.utils.data`` internals the loader pool relies on, in one place (private API:
``tests/test_batch.py::test_no_sigchld_handler_raises_into_the_step`` fails where they change)."""

from __future__ import annotations

from typing import Any

from torch.utils.data._utils import signal_handling


def keep_out_sigchld_handler() -> None:
    """Stop DataLoader from installing its ``SIGCHLD`` handler in this process.

    That handler raises "DataLoader worker ... is killed by signal" at whatever line the main
    thread is on when a worker exits: inside ``logging``'s module lock it leaks the lock, and the
    next thread that touches logging (a ``ProcessPoolExecutor``'s manager thread) waits forever,
    hanging the step. The loader pool finds dead workers itself (``LIVENESS_CHECK_S``).
    """
    signal_handling._SIGCHLD_handler_set = True


def forget_worker_pids(iterator: Any) -> None:
    """Unregister the iterator's workers from torch's ``SIGCHLD`` check before terminating them
    (where another DataLoader in the process did install the handler)."""
    if getattr(iterator, "_worker_pids_set", False):
        signal_handling._remove_worker_pids(id(iterator))
        iterator._worker_pids_set = False
