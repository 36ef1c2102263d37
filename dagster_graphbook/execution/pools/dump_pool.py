"""The dump pool: ``dump_fn(*tuple)`` calls in worker processes (or threads), bounded in flight.

Built on ``concurrent.futures``: a dead worker surfaces as ``BrokenProcessPool`` on the next
result instead of a hang, raised here as ``WorkerDied`` naming the dead workers. ``dump_fn``
reaches the workers once, through the pool initializer.

Calls with a bucket URL among their arguments (an upload) wait on the network: they go to a
worker process in chunks, each run there on threads (``io_calls.py``), so the workers keep
``runtime.io_concurrency`` of them in flight; with thread workers, on that many threads of their
own. Other calls go one by one, one at a time per worker, as ever.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from ...authoring._tempfiles import is_url, url_sizes
from ...authoring.files import recording_files
from ...errors import Label
from ...plan.settings import BatchRuntime
from ..errors import WorkerDied, cuda_fork_hint, exit_hint, killed_by_signal, url_named
from .io_calls import close_pool, map_calls, on_urls, own_pool, share
from .threads import pool_processes, pool_thread_ids
from .workers import PoolNice, init_worker

_DUMP_FN: Optional[Callable[..., Any]] = None
_CALL_TIMEOUT_S: Optional[float] = None
ABORT_GRACE_S = 5.0  # how long a failing step lets dump calls under way finish
DEATH_WAIT_S = 2.0  # how long a broken pool's dead worker may take to be reaped


class DumpDone(NamedTuple):
    key: Any  # what the caller attached (note and item index)
    error: Optional[str]  # traceback when dump_fn raised
    # (path, bytes) of files dump_fn says it wrote; bytes None: a URL dump_fn returned, its size
    # read from the store once the step's dumps are done (``with_sizes``)
    files: List[Tuple[str, Optional[int]]]


def _init(
    dump_fn: Callable[..., Any],
    node_id: str,
    node_name: str,
    nice: Any = 0,
    call_timeout_s: Optional[float] = None,
    step_pid: Optional[int] = None,
) -> None:
    global _DUMP_FN, _CALL_TIMEOUT_S
    init_worker(node_id, node_name, nice, step_pid)
    _DUMP_FN = dump_fn
    _CALL_TIMEOUT_S = call_timeout_s


def _written(
    result: Any, through_helper: Sequence[Tuple[str, Optional[int]]] = ()
) -> List[Tuple[str, Optional[int]]]:
    """Graphbook ignores dump_fn's return value; a path (or list of paths) returned is recorded,
    and so is every file the call wrote through ``atomic_path`` (each file once). A URL
    ``atomic_path`` uploaded has the size it uploaded; another URL's size is left to
    ``with_sizes`` (None): one listing of its folder for all the step's files there, not a
    request per file here."""
    paths = (
        [result]
        if isinstance(result, (str, os.PathLike))
        else list(result)
        if isinstance(result, (list, tuple))
        else []
    )
    uploaded = {path: size for path, size in through_helper if size is not None}
    out: List[Tuple[str, Optional[int]]] = []
    seen = set()
    for p in [*paths, *(path for path, _ in through_helper)]:
        if is_url(p):  # an object in a bucket
            url = str(p)
            if url not in seen:
                seen.add(url)
                out.append((url, uploaded.get(url)))
        elif isinstance(p, (str, os.PathLike)) and os.path.isfile(p):
            key = os.path.abspath(p)
            if key not in seen:
                seen.add(key)
                out.append((os.fspath(p), os.path.getsize(p)))
    return out


def with_sizes(files: Sequence[Tuple[str, Optional[int]]]) -> List[Tuple[str, int]]:
    """``files`` with the sizes left unknown read from their store (the objects not there are
    left out, as a local path that is no file is)."""
    sizes = url_sizes(path for path, size in files if size is None)
    return [
        (path, size if size is not None else sizes[path])
        for path, size in files
        if size is not None or path in sizes
    ]


def _call(
    args: Tuple[Any, ...], fn: Optional[Callable[..., Any]] = None
) -> Tuple[Optional[str], List[Tuple[str, Optional[int]]]]:
    from .call_timeout import time_limit

    try:
        with recording_files() as through_helper:
            call = fn or _DUMP_FN
            assert call is not None, "the pool's initializer sets _DUMP_FN"
            with time_limit(_CALL_TIMEOUT_S if fn is None else None, "dump_fn"):
                result = call(*args)
            return None, _written(result, through_helper)
    except (Exception, SystemExit) as exc:  # sys.exit() in dump_fn is this item's error too
        tb = url_named(traceback.format_exc(), exc)  # a bucket's error may not name the URL
        return tb + exit_hint(exc, "dump_fn") + cuda_fork_hint(exc), []


Called = Tuple[Optional[str], List[Tuple[str, Optional[int]]]]  # a call's (error, files)


def _call_many(calls: List[Tuple[Any, ...]], threads: int) -> List[Called]:
    """A chunk of calls on bucket URLs in a worker process, ``threads`` at a time."""
    return map_calls(_call, calls, threads)


def _exited(procs: List[Any], wait_s: float = DEATH_WAIT_S) -> List[Tuple[int, int]]:
    """(pid, exit code) of the processes that exited. The pool sees a death when the worker's
    pipe closes, a moment before the kernel lets it be reaped: wait that moment for a worker
    that died by itself (not by the pool's SIGTERM) to show."""
    deadline = time.monotonic() + wait_s
    while True:
        gone = [(p.pid, p.exitcode) for p in procs if not p.is_alive()]
        signalled = any(killed_by_signal(code) and code != -signal.SIGTERM for _, code in gone)
        if signalled or time.monotonic() >= deadline:  # an exit code alone may be a sibling's
            return gone
        time.sleep(0.01)


class ExecutorDumpPool:
    """Runs dump calls on a ``concurrent.futures`` executor (processes or threads): the
    ``batch_pools.DumpPool`` a batch run gets; ``submit`` blocks while ``max_in_flight`` calls are
    pending."""

    def __init__(
        self,
        dump_fn: Callable[..., Any],
        settings: BatchRuntime,
        *,
        node: Tuple[str, str],
        label: Label = "batch step",
    ):
        """Process workers where the step loads in worker processes, else threads; sized by
        ``settings.dump_pool_size``."""
        self.dump_fn = dump_fn
        self.label = label  # names the step in a WorkerDied
        self.max_in_flight = max(1, settings.max_dumps_in_flight)
        self.pending: Dict[Future, List[Any]] = {}  # a task -> the keys of its calls
        self.chunks: Set[Future] = set()  # the tasks that are chunks of calls (``_call_many``)
        self.chunk: List[Tuple[Any, Tuple[Any, ...]]] = []  # calls on URLs not sent yet
        size = max(1, settings.dump_pool_size)
        self.threads = settings.worker_type == "thread" or settings.num_workers == 0
        self.nice = PoolNice(settings.worker_nice, processes=not self.threads)
        self.size = size
        # the worker processes, kept here: a broken pool may forget its own before we look
        self.workers: Dict[int, Any] = {}
        # calls on URLs in flight per worker process (all of them on thread workers); one at a
        # time under call_timeout_s, whose limit needs the worker's main thread
        self.io_threads = (
            1
            if settings.call_timeout_s is not None
            else settings.io_concurrency
            if self.threads
            else share(settings.io_concurrency, size)
        )
        self.io_executor: Optional[ThreadPoolExecutor] = None  # thread workers' calls on URLs
        if self.threads:
            self.executor: Any = ThreadPoolExecutor(
                size,
                thread_name_prefix="graphbook-dump",
                initializer=self.nice.thread_started,
            )
        else:
            self.executor = ProcessPoolExecutor(
                size,
                mp_context=multiprocessing.get_context(settings.start_method),
                initializer=_init,
                initargs=(dump_fn, *node, self.nice.level, settings.call_timeout_s, os.getpid()),
            )

    def lower(self, by: int) -> None:
        """Lower the workers' priority by ``by`` nice levels (see ``priority.py``)."""
        if self.threads:
            self.nice.lower(pool_thread_ids(self.executor), by)
        else:
            pids = [p.pid for p in pool_processes(self.executor) if p.is_alive()]
            self.nice.lower(pids, by, processes=True)

    def submit(self, key: Any, args: Sequence[Any]) -> List[DumpDone]:
        done = self._poll(block=self.in_flight() >= self.max_in_flight)
        args = tuple(args)
        if self.io_threads > 1 and on_urls(args):
            if not self.threads:  # sent with the next calls on URLs, as one task
                self.chunk.append((key, args))
                if len(self.chunk) >= self.io_threads:
                    self._flush()
                return done
            if self.io_executor is None:
                self.io_executor = own_pool(self.io_threads, "dump")
            self.pending[self.io_executor.submit(_call, args, self.dump_fn)] = [key]
            return done
        if self.threads:
            self._send([key], _call, args, self.dump_fn)
        else:
            self._send([key], _call, args)
        return done

    def _send(self, keys: List[Any], fn: Callable[..., Any], *args: Any) -> Future:
        try:
            future = self.executor.submit(fn, *args)
        except BrokenProcessPool as exc:  # a worker died before its call's result was seen
            raise self._died(exc) from exc
        self.pending[future] = keys
        if not self.threads and len(self.workers) < self.size:  # started on the first calls
            self.workers.update((p.pid, p) for p in pool_processes(self.executor))
        return future

    def _flush(self) -> None:
        """Send the calls on URLs gathered so far to a worker process, as one task."""
        if self.chunk:
            chunk, self.chunk = self.chunk, []
            future = self._send([k for k, _ in chunk], _call_many, [a for _, a in chunk],
                                self.io_threads)  # fmt: skip
            self.chunks.add(future)

    def poll(self, block: bool = False) -> List[DumpDone]:
        """Finished calls (the calls on URLs gathered so far are sent first); with ``block``,
        wait for at least one. Raises if a worker died."""
        self._flush()
        return self._poll(block)

    def _poll(self, block: bool) -> List[DumpDone]:
        if block:  # what it waits for must be under way
            self._flush()
        if not self.pending:
            return []
        finished, _ = wait(
            list(self.pending), timeout=None if block else 0, return_when=FIRST_COMPLETED
        )
        out = []
        for future in finished:
            keys = self.pending.pop(future)
            try:
                results = future.result()
            except BrokenProcessPool as exc:
                raise self._died(exc) from exc
            if future not in self.chunks:
                results = [results]
            self.chunks.discard(future)
            out += [DumpDone(key, error, files) for key, (error, files) in zip(keys, results)]
        return out

    def _died(self, exc: BrokenProcessPool) -> WorkerDied:
        """The pool broke because a worker died: name it (the pool terminates the others with
        SIGTERM once it saw the death, so those are named only when no other is gone)."""
        procs = {**self.workers, **{p.pid: p for p in pool_processes(self.executor)}}
        gone = _exited(list(procs.values()))
        # those killed by a signal first: a sibling that saw the pool's pipes close may have
        # exited with code 1 before the pool's SIGTERM reached it
        dead = (
            sorted(
                (d for d in gone if d[1] != -signal.SIGTERM),
                key=lambda d: not killed_by_signal(d[1]),
            )
            or gone
        )
        return WorkerDied(
            self.label,
            f"a dump worker process died ({WorkerDied.how(dead)}) during dump_fn: "
            f"{WorkerDied.describe(dead) if dead else exc}",
            pids=[pid for pid, _ in dead],
            stage="dump_fn",
        )

    def drain(self) -> List[DumpDone]:
        out: List[DumpDone] = []
        self._flush()
        while self.pending:
            out += self.poll(block=True)
        return out

    def in_flight(self) -> int:
        """Calls submitted and not yet done."""
        return sum(len(keys) for keys in self.pending.values()) + len(self.chunk)

    def pending_keys(self) -> List[Any]:
        """The keys of the calls submitted and not yet done, in the order they were sent."""
        return [key for keys in self.pending.values() for key in keys] + [k for k, _ in self.chunk]

    def close(self, abort: bool = False, grace_s: float = ABORT_GRACE_S) -> None:
        """Shut down. On abort, calls not started are cancelled and calls under way get ``grace_s``
        to finish (a killed ``dump_fn`` would strand its temporary file); workers still busy after
        that are killed, so nothing outlives the step."""
        self.chunk.clear()  # never sent: nothing of them started
        if abort:
            for future in self.pending:
                future.cancel()
            running = [f for f in self.pending if not f.done()]
            if running:
                wait(running, timeout=grace_s)
            if not self.threads:
                stuck = any(not f.done() for f in running)
                for proc in pool_processes(self.executor):
                    if stuck and proc.is_alive():
                        proc.kill()
        io, self.io_executor = self.io_executor, None
        if io is not None:  # thread workers' calls on URLs: ended as the workers below
            close_pool(io, grace_s=0 if abort else None)
        if self.threads:
            from .threads import shut_down_threads

            shut_down_threads(self.executor, "graphbook-dump", grace_s=0 if abort else None)
        else:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self._release_workers()
        self.pending.clear()
        self.chunks.clear()

    def _release_workers(self) -> None:
        """Close the kept worker handles: each holds a sentinel pipe until closed."""
        for proc in self.workers.values():
            if proc.is_alive():  # a broken pool may leave one behind: nothing outlives the step
                proc.kill()
            proc.join()
            proc.close()
        self.workers.clear()
