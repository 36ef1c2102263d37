"""Temporary files beside their final path, renamed over it once complete: the one name scheme
(``.tmp-<pid>-...``) of every such writer (stored notes, ``atomic_path``, ``DumpJSONL``), and the
sweep that removes what a killed writer (``kill -9``) left."""

from __future__ import annotations

import os

TMP_PREFIX = ".tmp-"


def own_prefix() -> str:
    """How this process's temporary names start: ``.tmp-<pid>-`` (the pid lets the sweep tell a
    dead writer's file from a live one's)."""
    return f"{TMP_PREFIX}{os.getpid()}-"


def sweep_local_temporaries(folder: str) -> None:
    """Remove the temporary files in local ``folder`` that a writer on this machine left when it
    was killed (its pid is gone)."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        if not name.startswith(TMP_PREFIX):
            continue
        pid = name[len(TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not pid_exists(int(pid)):
            try:
                os.unlink(os.path.join(folder, name))
            except FileNotFoundError:
                pass


def pid_exists(pid: int) -> bool:
    """A process ``pid`` exists (a zombie, not yet reaped, too), ours or another user's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
