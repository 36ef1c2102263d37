"""What every pool worker does first: die with its parent, and log to stderr, not the run."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import shutil
import signal
import sys
import time
import types
from typing import Any, Callable, Dict, List, Optional, Sequence

from ...authoring._tempfiles import pid_exists  # the one check that a pid exists

_PR_SET_PDEATHSIG = 1


def _find_prctl() -> Optional[Callable[..., int]]:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up here, in the step process, at import: a forked worker that called dlopen/dlsym
# itself would wait forever on glibc's loader lock if another thread of the step process held it
# at the fork (a thread importing an extension module).
_PRCTL = _find_prctl() if sys.platform.startswith("linux") else None


def die_with_parent(step_pid: Optional[int] = None) -> None:
    """Ask Linux to SIGKILL this worker when its parent dies, so a killed step leaves no orphans.

    A worker forked just before its step process was killed asks too late (the request only
    covers a parent still alive), so it also exits when the step process ``step_pid`` is gone.
    """
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if step_pid is not None and not pid_running(step_pid):
        os._exit(1)


_WATCHING_RUN = False


def die_with_the_run() -> None:
    """A step process that a run's process started (Dagster's multiprocess executor) dies with
    it, so a killed run leaves no step writing for it. Runs in process (in any process the user
    started), and daemonic pool children, are left alone.

    Spawned, the run's process is this one's parent: the parent-death signal does it. Forked by
    a forkserver, the server is, and it outlives the run (CPython hands each child the server's
    liveness pipe, so its children keep it running): a thread watches the run's pid instead.
    """
    global _WATCHING_RUN
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None or not _a_dagster_step_process():
        return
    die_with_parent(parent.pid)
    if os.getppid() != parent.pid and not _WATCHING_RUN:
        _WATCHING_RUN = True
        import threading

        threading.Thread(
            target=_kill_self_when_gone, args=(parent.pid,), name="graphbook-run-watch", daemon=True
        ).start()


def _a_dagster_step_process() -> bool:
    """Started by Dagster's multiprocess executor for a step (its child-process target), not a
    process of the user's that runs a job in process: the parent-death signal fires when the
    *thread* that started a process ends, and a job queue's worker thread may end first."""
    target = getattr(multiprocessing.current_process(), "_target", None)
    return getattr(target, "__module__", None) == _DAGSTER_STEP_PROCESS


_DAGSTER_STEP_PROCESS = "dagster._core.executor.child_process_executor"


def _kill_self_when_gone(pid: int, every_s: float = 1.0) -> None:
    while pid_running(pid):
        time.sleep(every_s)
    os.kill(os.getpid(), signal.SIGKILL)  # as the parent-death signal would


def pid_running(pid: int) -> bool:
    """Running, not a zombie (a killed step stays one until its own parent reaps it); where
    there is no ``/proc``, ``pid_exists``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        return pid_exists(pid)


SHM_DIR = "/dev/shm"


def shm_free_bytes(path: str = SHM_DIR) -> Optional[int]:
    """Free bytes of the shared-memory filesystem that worker processes put their semaphores and
    torch its tensors in (None if unknown)."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def renice(ids: Sequence[int], by: int, *, whole_processes: bool = False) -> None:
    """Raise the nice value of this process's threads (on Linux a thread id is accepted as a pid)
    or, with ``whole_processes``, of every thread of each process, by ``by``, up to 19; ids that
    are gone are skipped. Linux keeps a nice value per thread: renicing a worker's pid alone
    would leave its other threads (a decoder's pool, its queue's feeder) where they were."""
    for i in ids:
        for t in _threads_of(i) if whole_processes else [i]:
            try:
                os.setpriority(os.PRIO_PROCESS, t, min(19, os.getpriority(os.PRIO_PROCESS, t) + by))
            except OSError:
                pass


def _threads_of(pid: int) -> List[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):  # not Linux, or gone
        return [pid]


def lower_priority(nice: int, thread: bool = False) -> None:
    """Raise this worker's nice value by ``nice`` (for a thread: only that thread's, as Linux
    allows).

    Loading and dumping are background work: with a CPU-bound model in the step process, workers
    at the same priority take a third of the cores each and the model waits for CPU, while
    lower-priority workers get whatever the model leaves, and the model's share stays whole.
    """
    if nice <= 0:
        return
    if thread and sys.platform.startswith("linux"):
        import threading

        renice([threading.get_native_id()], nice)
    elif not thread:
        renice([os.getpid()], nice)


class PoolNice:
    """A pool's nice level: the one each worker sets when it starts (pools start workers on
    demand, so it is read then), raised for the workers already running by ``lower`` (see
    ``priority.py``). For worker processes ``level`` is shared memory they read at start-up."""

    def __init__(self, nice: int, *, processes: bool = False):
        start = max(0, nice)  # -1: chosen later
        self.level: Any = (
            multiprocessing.RawValue("i", start)
            if processes
            else types.SimpleNamespace(value=start)
        )

    @property
    def nice(self) -> int:
        return int(self.level.value)

    def thread_started(self) -> None:
        lower_priority(self.nice, thread=True)

    def lower(self, ids: Sequence[int], by: int, *, processes: bool = False) -> None:
        self.level.value += by
        renice(ids, by, whole_processes=processes)


def init_worker(
    node_id: str, node_name: str, nice: Any = 0, step_pid: Optional[int] = None
) -> None:
    """``nice``: a level, or ``PoolNice.level`` (read now: the worker may start after a lower)."""
    from ...authoring.log import log_to_stderr

    die_with_parent(step_pid)
    lower_priority(nice if isinstance(nice, int) else int(nice.value))
    log_to_stderr(node_id, node_name)


def start_method_problem(start_method: str, objects: Dict[str, Any]) -> Optional[str]:
    """Why workers started with ``start_method`` could not receive ``objects`` (None if they can).

    Fork inherits everything. Spawn and forkserver pickle by reference, so functions and classes
    must live in modules a new interpreter can import (custom node files loaded by path cannot).
    """
    if start_method == "fork":
        return None
    if start_method not in multiprocessing.get_all_start_methods():
        return (
            f"start method {start_method!r} is not available here (available: "
            f"{', '.join(multiprocessing.get_all_start_methods())})"
        )
    import pickle

    for what, obj in objects.items():
        for ref in (
            obj,
            type(obj),
            getattr(obj, "__func__", None),
            getattr(getattr(obj, "__self__", None), "__class__", None),
        ):
            module = sys.modules.get(getattr(ref, "__module__", None) or "")
            if module is not None and (
                getattr(module, "__graphbook_file_module__", False) or module.__name__ == "__main__"
            ):
                return (
                    f"{what} {getattr(ref, '__qualname__', ref)!r} is defined in "
                    f"{getattr(module, '__file__', module.__name__)}, "
                    f"a file loaded by path that {start_method} workers cannot "
                    "import; use start_method 'fork' "
                    "or move the node into an installed package"
                )
        try:
            pickle.dumps(obj)
        except Exception as exc:
            return (
                f"{what} cannot be sent to {start_method} workers: {type(exc).__name__}: "
                f"{exc}; use start_method 'fork'"
            )
    return None
