"""The ``torch`` internals the loader pool relies on, in one place (private API:
``tests/execution/test_batch.py::test_no_sigchld_handler_raises_into_the_step`` and the
worker-death and hang tests fail where they change)."""

from __future__ import annotations

import sys
import weakref
from typing import Any, List, Optional

import torch
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


class BatchNotReady(Exception):
    """No batch arrived within the wait that ``wait_in_slices`` set; the iterator is unchanged,
    so ``next`` may be called again to keep waiting."""


def wait_in_slices(iterator: Any, slice_s: Optional[float]) -> None:
    """Make ``next(iterator)`` (a multi-process DataLoader iterator) raise ``BatchNotReady`` when
    no batch arrived within ``slice_s``.

    DataLoader's own ``timeout`` raises a plain ``RuntimeError`` that only its text tells apart
    from a dead worker's; here the wait is torch's own ``_try_get_data(timeout)``, which checks
    the workers' liveness when it times out (raising for a dead one) and otherwise says it got
    nothing. For DataLoaders without ``pin_memory`` (the pool pins at its copy out of the ring)
    this is what ``_get_data`` does with a ``timeout``, raising our type instead of its text.
    """
    if not hasattr(iterator, "_try_get_data"):
        return  # num_workers=0: loads in this process, nothing to wait for
    if slice_s is None:  # back to torch's own wait (a kept iterator's restart counts on it)
        iterator.__dict__.pop("_get_data", None)
        return
    ref = weakref.ref(iterator)  # no cycle: the iterator's __del__ still stops its workers

    def get_data() -> Any:
        it = ref()
        assert it is not None  # called by the iterator itself
        got, data = it._try_get_data(slice_s)
        if got:
            return data
        raise BatchNotReady(f"no batch within {slice_s:g} s")

    iterator._get_data = get_data


def tasks_outstanding(iterator: Any) -> Optional[int]:
    """Batches requested from the iterator's workers but not yet consumed (None: unknown)."""
    return getattr(iterator, "_tasks_outstanding", None)


def loader_workers(iterator: Any) -> List[Any]:
    """The iterator's worker processes (``multiprocessing.Process``; none with num_workers=0)."""
    return list(getattr(iterator, "_workers", None) or [])


def shutdown_workers(iterator: Any) -> None:
    """Stop and join the iterator's workers now (torch does it at garbage collection)."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def is_cuda_in_bad_fork_error(exc: BaseException) -> bool:
    """Whether ``exc`` is CUDA refusing to start in this process, a fork of a process that had
    started it: this process is in torch's "bad fork" state and ``exc`` was raised by
    ``torch.cuda._lazy_init`` itself (torch raises a plain ``RuntimeError`` there)."""
    if not torch.cuda._is_in_bad_fork():
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code is torch.cuda._lazy_init.__code__


def storage_refs(tensor: torch.Tensor) -> int:
    """Holders of ``tensor``'s storage besides ``tensor`` itself: other tensors and views on it
    (numpy arrays too), and its Python storage object where something keeps that.

    ``_storage_Use_Count`` counts C++ holders, here ``tensor`` and the storage object taken below;
    that object, kept alive by torch for the storage, has three Python references here.
    """
    storage = tensor.untyped_storage()
    return torch._C._storage_Use_Count(storage._cdata) - 2 + sys.getrefcount(storage) - 3


def new_shared_storage(size: int) -> torch.UntypedStorage:
    """``size`` bytes of CPU storage made in shared memory directly (what torch's reducers use)."""
    return torch.UntypedStorage._new_shared(size)
