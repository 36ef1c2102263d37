"""Leak checks after a run: worker processes, file descriptors and ``/dev/shm`` entries left by
this process tree."""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Optional, Set

import psutil


def _shm() -> set:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _holders(name: str) -> set:
    """Pids that map or hold open ``/dev/shm/<name>``."""
    path = f"/dev/shm/{name}"
    pids = set()
    for pid in psutil.pids():
        try:
            with open(f"/proc/{pid}/maps") as f:
                if path in f.read():
                    pids.add(pid)
                    continue
            if any(
                os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd")
            ):
                pids.add(pid)
        except OSError:
            continue
    return pids


# a mapping of a /dev/shm file in /proc/PID/maps: its inode (glibc's sem_open maps a temporary
# name, "sem.XXXXXX (deleted)", before linking it as "sem.mp-...": the inode is what matches)
_SHM_MAP = re.compile(r"^\S+ \S+ \S+ \S+ (\d+)\s+/dev/shm/", re.M)


class _TreeShm:
    """The ``/dev/shm`` entries this process and its descendants have mapped or opened, sampled
    from /proc every 0.1 s from ``start`` to ``stop`` (the end of the test: tests/conftest.py).
    An orphaned entry (nobody holds it any more) is a test's leak only if its own process tree
    held it: other test workers (``pytest -n``) make and drop entries meanwhile, and a run killed
    in another worker leaves orphaned semaphores until its resource tracker unlinks them. An
    entry made and orphaned between two samples is missed; the leaks these checks are for (ring
    blocks, semaphores of killed workers) live for the whole run.

    Each sample reads every process of the tree's /proc maps (a process with torch loaded maps
    about 900 regions: 2-3 ms of CPU): sampling on after the test, for the rest of the pytest
    worker's life, cost each worker a few percent of a core, more while a later test's processes
    ran."""

    def __init__(self) -> None:
        self.seen: Set[int] = set()  # inodes
        self.watching = False  # since start: an orphan counts only if the tree held it
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self.stop()
        self.seen = set()
        self.watching = True
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._sample, args=(self._stopped, self.seen), name="tree-shm", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """No more samples; ``seen`` and ``watching`` stay for the test's last checks."""
        if self._thread is not None:
            self._stopped.set()
            # a sample reading a busy process's maps may take a moment: never wait for it long
            # (the thread is a daemon; it ends at its next check)
            self._thread.join(timeout=2)
            self._thread = None

    def reset(self) -> None:
        """Stopped and forgotten: the next test starts unwatched."""
        self.stop()
        self.seen = set()
        self.watching = False

    @staticmethod
    def _sample(stopped: threading.Event, seen: Set[int]) -> None:
        """Into this watch's own ``seen``: a sample still running after ``stop`` gave up waiting
        for it adds nothing to the next test's."""
        me = psutil.Process()
        while not stopped.is_set():
            try:
                tree = [me] + me.children(recursive=True)
            except psutil.Error:
                tree = [me]
            for proc in tree:
                seen |= _mapped(proc.pid)
            stopped.wait(0.1)


def _mapped(pid: int) -> Set[int]:
    """The inodes of the /dev/shm files ``pid`` maps or holds open."""
    inodes: Set[int] = set()
    try:
        with open(f"/proc/{pid}/maps") as f:
            inodes.update(int(i) for i in _SHM_MAP.findall(f.read()))
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/dev/shm/"):
                    inodes.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
            except OSError:
                continue
    except OSError:
        pass
    return inodes


def _inode(name: str) -> int:
    try:
        return os.stat(f"/dev/shm/{name}").st_ino
    except OSError:
        return -1


_TREE = _TreeShm()


def shm_snapshot() -> set:
    """``/dev/shm`` now, to compare after a run with ``shm_leaks``; starts watching what this
    process tree maps from here on."""
    _TREE.start()
    return _shm()


def shm_leaks(before: set, mine: set, grace_s: float = 2.0, ignore: tuple = ()) -> set:
    """New ``/dev/shm`` entries still held by this process tree, or orphaned after it held them.

    /dev/shm is shared with every other process on the machine (other test runs too): an entry
    held only by a process outside ``mine`` is theirs, and so is an orphan this tree never held
    (``_TreeShm``; before ``shm_snapshot`` watched, any orphan counts). Short-lived ones get
    ``grace_s`` to go.
    """
    deadline = time.monotonic() + grace_s
    watched = _TREE.watching
    while True:
        new = {n for n in _shm() - before if not n.startswith(ignore)}
        if watched:
            _TREE.seen |= set().union(*(_mapped(pid) for pid in mine))
        leaked = {
            n
            for n in new
            if _holders(n) & mine or (not _holders(n) and (not watched or _inode(n) in _TREE.seen))
        }
        if not leaked or time.monotonic() > deadline:
            return leaked
        time.sleep(0.1)


def end_shm_watch() -> None:
    """End ``shm_snapshot``'s watch (tests/conftest.py: after each test)."""
    _TREE.reset()


class Leaks:
    """What this process holds before a run, to compare after it (children, fds, /dev/shm)."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.children = {p.pid for p in self.me.children(recursive=True)}
        self.fdt = self.fd_targets()
        self.fds = len(self.fdt)
        self.shm = shm_snapshot()

    def new_children(self, wait_s: float = 10.0) -> list:
        deadline = time.monotonic() + wait_s
        while True:
            alive = [
                p
                for p in self.me.children(recursive=True)
                if p.pid not in self.children and p.status() != psutil.STATUS_ZOMBIE
            ]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.05)

    @staticmethod
    def fd_targets() -> list:
        """This process's open files, less multiprocessing's heap arena (``/dev/shm/pym-*``:
        made once per process by the first shared value, a process pool's priority, and kept for
        its life, it is no leak of the test that happened to make it first) and the /proc files
        ``_TreeShm``'s thread reads for a moment."""
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if not target.startswith(("/dev/shm/pym-", "/proc/")):
                out.append(target)
        return sorted(out)

    def check(self) -> None:
        assert self.new_children() == [], "worker processes outlived the step"
        mine = {self.me.pid} | {p.pid for p in self.me.children(recursive=True)}
        assert shm_leaks(self.shm, mine) == set(), "shared memory left in /dev/shm"
        assert len(self.fd_targets()) <= self.fds, (
            f"file descriptors leaked: {self.fdt} before, {self.fd_targets()} after"
        )
