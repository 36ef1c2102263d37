"""Calls on bucket URLs, many at once (``runtime.io_concurrency``).

A ``load_fn`` reading ``s3://...`` or a ``dump_fn`` uploading there spends its time waiting on
the network, not on a core: a worker that runs its calls one after another keeps one request in
flight, and a step with a worker per core keeps a few (measured on the nightly demo with a 50 ms
bucket: about 2, the latency costing the day 0.53 of what its requests cost one after another).
So a worker runs its share of such calls on threads of its own (``map_calls``): a loader worker
the items of its batch, a dump worker a chunk of calls (``dump_pool.py``). Local paths keep one
call at a time per worker: a disk or a decoder is bound by a core, and more threads there only
contend for the GIL.

The calls reach a bucket through the filesystem fsspec caches per process; s3fs's client keeps
at most 10 connections (botocore's ``max_pool_connections``) unless told, so ``widen_pools``
raises that default, for the filesystems made from then on, to the threads that call it.

A forked worker inherits the step process's fsspec event loop (its thread does not come along)
and with it the loop's epoll instance, which is shared across the fork. The filesystems the
worker inherits close their connections when fsspec drops them there (their finalizer), and each
close took the connection's socket out of that shared epoll: the step process's own connections
then never read their replies again (found as a step's 12 preview reads hanging until their
timeout after its loader workers ended). ``_apart_in_child`` gives the inherited loop a
selector of the worker's own first.
"""

from __future__ import annotations

import itertools
import math
import os
import selectors
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, List, Optional, Sequence, TypeVar

from ...authoring._tempfiles import is_url

T = TypeVar("T")
R = TypeVar("R")

PREFIX = "graphbook-io"  # a worker process's I/O threads
_POOL: Optional[ThreadPoolExecutor] = None
_POOL_PID = 0
_POOL_SIZE = 0
_LOCK = threading.Lock()
_NUMBERS = itertools.count(1)


def on_urls(values: Sequence[Any]) -> bool:
    """Whether ``values`` (an item, or a call's arguments) name a bucket object: a URL among
    them, as a string or path-like value (``s3://bucket/key``, not ``file://``)."""
    return any(isinstance(v, (str, os.PathLike)) and is_url(v) for v in values)


def share(concurrency: int, workers: int) -> int:
    """One worker's threads of ``concurrency`` spread over ``workers`` (at least one)."""
    return max(1, math.ceil(concurrency / max(1, workers)))


def map_calls(
    call: Callable[[T], R],
    inputs: Sequence[T],
    threads: int,
    pool: Optional[ThreadPoolExecutor] = None,
) -> List[R]:
    """``[call(x) for x in inputs]``, in order, ``threads`` at a time: on ``pool`` (the threads
    of a loader in the step process, ``own_pool``), else on this worker process's I/O threads;
    in this thread when ``threads`` is 1 or there is one input. ``call`` must not raise: each
    input's failure is its own result."""
    if threads <= 1 or len(inputs) < 2:
        return [call(x) for x in inputs]
    return list((pool or _worker_pool(threads)).map(call, inputs))


def own_pool(threads: int, what: str) -> ThreadPoolExecutor:
    """I/O threads for one pool of the step process (``what``: load, dump), named apart from
    every other pool's (``graphbook-io-<what>-<n>_<i>``); its owner ends them (``close_pool``)."""
    widen_pools(threads)
    return ThreadPoolExecutor(threads, thread_name_prefix=f"{PREFIX}-{what}-{next(_NUMBERS)}")


def close_pool(pool: ThreadPoolExecutor, grace_s: Optional[float] = None) -> None:
    """Cancel ``pool``'s queued calls; idle threads end now, those in a call get a short grace,
    then are let go (``threads.shut_down_threads``: one stuck in a read never holds the step's
    end or the interpreter's exit)."""
    from .threads import shut_down_threads

    prefix = getattr(pool, "_thread_name_prefix", "") or PREFIX
    shut_down_threads(pool, prefix + "_", grace_s=grace_s)


def _worker_pool(threads: int) -> ThreadPoolExecutor:
    """A worker process's I/O threads (made in the worker: a forked one makes its own), kept
    for the worker's life (its exit ends them); made again, larger, when a call asks for more."""
    global _POOL, _POOL_PID, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_PID != os.getpid() or _POOL_SIZE < threads:
            if _POOL is not None and _POOL_PID == os.getpid():
                _POOL.shutdown(wait=False)
            widen_pools(threads)
            _POOL = ThreadPoolExecutor(threads, thread_name_prefix=PREFIX)
            _POOL_PID, _POOL_SIZE = os.getpid(), threads
        return _POOL


# botocore's own default (``max_pool_connections``): what s3fs's client keeps when not told
_BOTO_CONNECTIONS = 10
_WIDENED = 0  # the pool size this module configured (0: none; another one is the user's)


def widen_pools(connections: int) -> None:
    """s3fs filesystems made from now on in this process keep up to ``connections`` connections
    (fsspec's configuration of the ``s3`` protocol), unless a pool size is configured there
    already by someone else; a ``config_kwargs`` a caller passes itself wins over it."""
    global _WIDENED
    if connections <= max(_BOTO_CONNECTIONS, _WIDENED):
        return
    import fsspec.config

    s3 = fsspec.config.conf.setdefault("s3", {})
    config = dict(s3.get("config_kwargs") or {})
    if config.get("max_pool_connections", _WIDENED) != _WIDENED:
        return  # the user's own
    config["max_pool_connections"] = _WIDENED = connections
    s3["config_kwargs"] = config


_PARENT_LOOP: Any = (
    None  # fsspec's event loop as a fork found it (set in the parent, read in the child)
)


def _note_loop_before_fork() -> None:
    global _PARENT_LOOP
    asyn = sys.modules.get("fsspec.asyn")
    _PARENT_LOOP = asyn.loop[0] if asyn is not None else None  # fsspec resets it in the child


def _apart_in_child() -> None:
    """In a forked child: the inherited fsspec loop gets a selector of the child's own, so what
    the child closes there leaves the parent's epoll (shared across the fork) alone."""
    global _PARENT_LOOP
    loop, _PARENT_LOOP = _PARENT_LOOP, None
    shared = getattr(loop, "_selector", None)
    if shared is None:
        return
    loop._selector = selectors.DefaultSelector()
    try:
        shared.close()  # the child's own descriptor of the epoll: the parent's stays open
    except Exception:  # noqa: BLE001 - nothing of the parent's may fail a worker's start
        pass


os.register_at_fork(before=_note_loop_before_fork, after_in_child=_apart_in_child)
