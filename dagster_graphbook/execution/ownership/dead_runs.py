"""Runs whose process was killed (``kill -9``, the OOM killer) while they were in progress.

A run executed by a process of ours (``dagster-graphbook run/materialize``, ``run_workflow``,
``run_job``, and any run of a job on ``graphbook_executor``, such as a Launchpad run) has no
launcher health check watching it: killed, it stays STARTED in the instance forever, holds its
concurrency slots (a ``gpu`` pool limited to 1 made every later batch run wait forever) and its
notes are never pruned.

Ownership is a kernel lock, not a tag: the process executing a run holds a shared ``flock`` on
``<instance root>/.graphbook/run-owners/<run id>.lock`` from before its first step until it ends,
and removes the file before letting go; a step process of the run (multiprocess executor) holds
it too while its step runs. The kernel drops a lock when its process dies, in whatever PID
namespace it lives, so a lock file that can be locked exclusively while still in place is
evidence, recorded by us alone, that every process of the run died without cleaning up. Before
a run starts, such runs are marked failed and their slots freed. Runs without a lock file
(another executor, a launcher of its own, a run of an older version) are never judged; tags and
run config play no part, so they cannot be used to get a live run failed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional

import dagster as dg

_OWNERS = os.path.join(".graphbook", "run-owners")
_SUFFIX = ".lock"
_STALE_TMP_S = 60.0  # a temporary lock file older than this was left by a killed owner
RESWEEP_S = 10.0  # how often a run of ours looks again for dead runs while it is in progress
# Read-write: on NFS, flock is emulated with fcntl locks, and an exclusive one needs write access.
_OPEN = os.O_RDWR | os.O_CLOEXEC
_held: Dict[str, int] = {}  # run id -> descriptor of the lock this process holds


def _forget_in_child() -> None:
    """A forked child (a loader worker) must not keep its parent's locks alive after the parent
    dies: close its copies of the descriptors."""
    for fd in _held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _owners_dir(instance: dg.DagsterInstance) -> Optional[str]:
    """Where owners' lock files live; None for an in-memory instance no other process sees."""
    if instance.is_ephemeral:
        return None
    return os.path.join(instance.root_directory, _OWNERS)


@contextlib.contextmanager
def own_run(
    instance: dg.DagsterInstance, run_id: str, warn: Callable[[str], None] = lambda _: None
) -> Iterator[None]:
    """Fail the runs whose owner died (``warn`` tells of each), then hold ``run_id``'s lock
    until the block ends. Re-entrant within a process."""
    folder = _owners_dir(instance)
    if folder is None or run_id in _held:
        yield
        return
    sweep_dead_runs(instance, warn)
    final = os.path.join(folder, run_id + _SUFFIX)
    fd = _create_lock(folder, run_id, final, warn)
    if fd is None:
        yield
        return
    _held[run_id] = fd
    stop = threading.Event()
    watcher = threading.Thread(
        target=_resweep, args=(instance, stop, warn), name="graphbook-dead-runs", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=30)
        _held.pop(run_id, None)
        try:
            os.unlink(final)  # removed before the lock goes: a free lock on a linked file = dead
        except FileNotFoundError:
            pass
        except OSError as exc:  # the folder became read-only: a later run's sweep removes it
            _mark_ended(fd)
            warn(
                f"could not remove the owner lock of run {run_id} in {folder} ({exc.strerror}): "
                "the run itself is unaffected; the next run removes the file once the folder "
                "is writable again"
            )
        os.close(fd)


def _unowned(run_id: str, folder: str, exc: OSError) -> str:
    return (
        f"cannot record the owner of run {run_id} in {folder} ({exc.strerror}): the run goes "
        "on unowned, so if its process is killed the run will not be marked failed by the next "
        "one; make the folder writable"
    )


def _create_lock(
    folder: str, run_id: str, final: str, warn: Callable[[str], None]
) -> Optional[int]:
    """A descriptor holding a shared lock on ``final``, created locked; None (``warn`` says why)
    where the folder cannot be written (a read-only mount, no permission, a full disk): the run
    is then not owned, as under other executors."""
    tmp = os.path.join(folder, f".{run_id}.{os.getpid()}.tmp")
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | _OPEN, 0o644)
    except OSError as exc:
        warn(_unowned(run_id, folder, exc))
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # locked before it has its name: never seen unlocked
        info = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        os.write(fd, json.dumps(info).encode())  # for people reading the folder
        os.replace(tmp, final)
        return fd
    except OSError as exc:  # the folder turned read-only or full meanwhile
        warn(_unowned(run_id, folder, exc))
        _drop_lock(fd, tmp)
        return None
    except BaseException:
        _drop_lock(fd, tmp)
        raise


def _drop_lock(fd: int, tmp: str) -> None:
    os.close(fd)
    with contextlib.suppress(OSError):  # left behind where read-only: a later sweep removes it
        os.unlink(tmp)


def _mark_ended(fd: int) -> None:
    """Say in a lock file that could not be removed that its owner ended cleanly, so a sweep in
    the moment before the run is recorded finished does not judge it dead."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"ended": time.time()}).encode(), 0)


def sweep_dead_runs(instance: dg.DagsterInstance, warn: Callable[[str], None]) -> None:
    """``fail_dead_runs``, telling ``warn`` of each run it failed."""
    for dead in fail_dead_runs(instance):
        warn(
            f"run {dead} was left in progress by a process that is gone (killed); marked it "
            "failed and freed its concurrency slots"
        )


def _resweep(
    instance: dg.DagsterInstance, stop: threading.Event, warn: Callable[[str], None]
) -> None:
    """Look again every ``RESWEEP_S`` while the run goes on: a run waiting for the pool slot of a
    run whose last process (an orphaned step) ended later would otherwise wait forever."""
    while not stop.wait(RESWEEP_S):
        try:
            sweep_dead_runs(instance, warn)
        except Exception as exc:  # the instance busy or gone: the next look, or the next run
            warn(f"could not look for dead runs: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def join_run(
    instance: Optional[dg.DagsterInstance],
    run: Optional[dg.DagsterRun],
    warn: Callable[[str], None] = lambda _: None,
) -> Iterator[None]:
    """Hold the run's lock beside its owner while a step runs in a process of its own (from its
    resources' start to its end), so the run is not judged dead while one of its steps still
    works (its orchestrator killed). ``run`` is the run as the caller's context knows it. Outside
    a run (no instance or run) it does nothing; nor does it for a context made after its run
    ended (``execute_job``'s result builds the job's resources again, as ``dagster job execute``
    and ``dg launch`` do): that run is over, not dead, and none of its steps is working. A lock
    it cannot open or take (a read-only folder) leaves the step unowned, as ``warn`` says."""
    folder = _owners_dir(instance) if instance is not None and run is not None else None
    if folder is None or instance is None or run is None or run.is_finished or run.run_id in _held:
        yield
        return
    run_id = run.run_id
    try:
        fd = os.open(os.path.join(folder, run_id + _SUFFIX), _OPEN)
    except FileNotFoundError:  # a run nobody owns (another executor), or one judged dead
        now = instance.get_run_by_id(run_id)
        if now is not None and now.is_finished:  # ended since this step's context was made
            raise _judged_dead(run_id) from None
        yield
        return
    except OSError as exc:  # a read-only or full folder: the step goes on, unowned
        warn(_unowned(run_id, folder, exc))
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a sweeper judges the run
        if os.fstat(fd).st_nlink == 0:  # the sweeper found every process of the run gone
            raise _judged_dead(run_id)
    except OSError as exc:  # no locks on this file system (ENOLCK)
        os.close(fd)
        warn(_unowned(run_id, folder, exc))
        yield
        return
    except BaseException:
        os.close(fd)
        raise
    _held[run_id] = fd
    try:
        yield
    finally:
        _held.pop(run_id, None)
        os.close(fd)


def _judged_dead(run_id: str) -> dg.Failure:
    """A step process that starts after its run's orchestrator was killed and the run marked
    failed (its slots freed for other runs) must not do its work beside theirs."""
    return dg.Failure(
        f"run {run_id} was marked failed before this step could start: the process orchestrating "
        "it was killed and its concurrency slots were freed for other runs, so the step does not "
        "run; re-execute the run from failure"
    )


def _owner_died(path: str) -> Optional[int]:
    """The descriptor of ``path`` locked by us when its owner died without removing it (the
    caller closes it), else None: the owner is alive, or ended and removed the file."""
    try:
        fd = os.open(path, _OPEN)
    except OSError:  # removed meanwhile, or a folder we may not write: nothing to judge
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino == os.stat(path).st_ino:
            return fd
    except (BlockingIOError, FileNotFoundError):  # held by a live owner / removed meanwhile
        pass
    os.close(fd)
    return None


def fail_dead_runs(instance: dg.DagsterInstance) -> List[str]:
    """Mark the runs whose owner died as failed and free their concurrency slots; returns their
    ids. Only runs with a lock file of ours are judged."""
    folder = _owners_dir(instance)
    if folder is None:
        return []
    try:
        names = sorted(os.listdir(folder))
    except OSError:  # no folder yet, or one we may not read: nothing to judge
        return []
    failed = []
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith("."):
            _sweep_temporary(path)
            continue
        run_id = name[: -len(_SUFFIX)]
        if not name.endswith(_SUFFIX) or run_id in _held:
            continue
        fd = _owner_died(path)
        if fd is None:
            continue
        try:
            run = instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                if _ended_just_now(fd):  # its owner ended; its end is being recorded
                    continue
                _fail(
                    instance,
                    run,
                    f"the process running it ({_owner_info(fd)}) is gone: killed (kill -9, out "
                    "of memory) while the run was in progress (its run-owner lock was released); "
                    "marked failed by dagster-graphbook before the next run",
                )
                failed.append(run_id)
            elif run is not None:  # marked failed by another (Dagster's code server), not
                _free_slots(instance, run_id)  # freed; or ended, its file left (read-only)
            with contextlib.suppress(OSError):  # a read-only folder: a later sweep removes it
                os.unlink(path)
        finally:
            os.close(fd)
    return failed


def _owner_info(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {int(info['pid'])} on {info['host']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its process"


def _ended_just_now(fd: int) -> bool:
    """The lock file says its owner ended cleanly (``_mark_ended``) less than ``_STALE_TMP_S``
    ago: its run may not be recorded finished yet. Later, a run still in progress is dead."""
    try:
        ended = float(json.loads(os.pread(fd, 4096, 0) or b"{}")["ended"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return time.time() - ended < _STALE_TMP_S


def _fail(instance: dg.DagsterInstance, run: dg.DagsterRun, why: str) -> None:
    """Free the concurrency slots ``run`` claimed, then mark it failed: killed in between, the
    run is still in progress and the next sweep finishes the job (the other way round, its slots
    stayed claimed by a finished run for good)."""
    _free_slots(instance, run.run_id)
    instance.report_run_failed(run, why)


def _free_slots(instance: dg.DagsterInstance, run_id: str) -> None:
    storage = instance.event_log_storage
    if storage.supports_global_concurrency_limits:
        storage.free_concurrency_slots_for_run(run_id)


def _sweep_temporary(path: str) -> None:
    """A lock file killed before it got its name: unlocked and old."""
    try:
        if time.time() - os.stat(path).st_mtime < _STALE_TMP_S:
            return
    except FileNotFoundError:
        return
    fd = _owner_died(path)
    if fd is not None:
        with contextlib.suppress(OSError):  # a read-only folder: a later sweep removes it
            os.unlink(path)
        os.close(fd)


class InterruptBackstop:
    """Ends a run that ignores SIGINT/SIGTERM: Dagster delays signals to points inside steps, so
    a run waiting for a pool slot (``dagster instance concurrency set gpu 1``, held by another
    run) kept waiting, at full CPU, through every Ctrl-C and SIGTERM. ``grace_s`` after a signal
    that the run did not act on, it is marked failed, its slot claims freed, and the process
    exits with status 130."""

    def __init__(self, instance: dg.DagsterInstance, token_tag: str, token: str, grace_s: float):
        self.instance, self.tags, self.grace_s = instance, {token_tag: token}, grace_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="graphbook-interrupt", daemon=True)

    def __enter__(self) -> InterruptBackstop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()

    def _watch(self) -> None:
        from ...dagster_internals import check_captured_interrupt

        since: Optional[float] = None
        while not self.done.wait(0.5):
            if not check_captured_interrupt():
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= self.grace_s:
                self._stop()

    def _stop(self) -> None:
        runs = self.instance.get_runs(filters=dg.RunsFilter(tags=self.tags), limit=1)
        for run in runs:
            if run.is_finished:
                return
            _fail(
                self.instance,
                run,
                f"interrupted (SIGINT/SIGTERM) and still not ended {self.grace_s:g} s later "
                "(waiting for a pool's concurrency slot?); stopped by dagster-graphbook",
            )
        if self.done.is_set():
            return
        print(
            f"interrupted, and the run did not stop within {self.grace_s:g} s: marked it failed; "
            "exiting",
            file=sys.stderr,
            flush=True,
        )
        os._exit(130)
