"""What the end-to-end tests share: leak checks after a run (worker processes, file descriptors,
``/dev/shm``) and whether this machine can make a private mount namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

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


def shm_leaks(before: set, mine: set, grace_s: float = 2.0, ignore: tuple = ()) -> set:
    """New ``/dev/shm`` entries that are orphaned or still held by this process tree.

    /dev/shm is shared with every other process on the machine (other test runs too): an entry
    held only by a process outside ``mine`` is theirs. Short-lived ones get ``grace_s`` to go.
    """
    deadline = time.monotonic() + grace_s
    while True:
        new = {n for n in _shm() - before if not n.startswith(ignore)}
        leaked = {n for n in new if not _holders(n) or _holders(n) & mine}
        if not leaked or time.monotonic() > deadline:
            return leaked
        time.sleep(0.1)


class Leaks:
    """What this process holds before a run, to compare after it (children, fds, /dev/shm)."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.children = {p.pid for p in self.me.children(recursive=True)}
        self.fds = self.me.num_fds()
        self.fdt = self.fd_targets()
        self.shm = _shm()

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
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                out.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        return sorted(out)

    def check(self) -> None:
        assert self.new_children() == [], "worker processes outlived the step"
        mine = {self.me.pid} | {p.pid for p in self.me.children(recursive=True)}
        assert shm_leaks(self.shm, mine) == set(), "shared memory left in /dev/shm"
        assert self.me.num_fds() <= self.fds, (
            f"file descriptors leaked: {self.fdt} before, {self.fd_targets()} after"
        )


def _can_unshare() -> str:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs -o size=1m tmpfs /mnt",
        ],
        capture_output=True,
        text=True,
    )
    return (
        ""
        if probe.returncode == 0
        else f"cannot make a private mount namespace here (not root?): {probe.stderr.strip()}"
    )
