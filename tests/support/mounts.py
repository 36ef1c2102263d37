"""Folders made read-only for real, under live processes, and whether this machine can make a
private mount namespace (``unshare -m``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator, List

import pytest


@contextlib.contextmanager
def read_only_switch(folder: Any) -> Iterator[Any]:
    """``(freeze, thaw)`` for ``folder`` as an operator does it: as root (who ignores mode bits)
    a read-only bind mount over it (a new mount, so taking it read-only is not refused for the
    files live processes hold open; opens for writing and unlinks through it fail with EROFS);
    otherwise ``chmod a-w`` (EACCES). Whatever is mounted is unmounted at the end."""
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    if os.geteuid() != 0:
        try:
            yield (lambda: os.chmod(folder, 0o555)), (lambda: os.chmod(folder, 0o755))
        finally:
            os.chmod(folder, 0o755)
        return
    mounted: List[str] = []

    def freeze() -> None:
        subprocess.run(["mount", "--bind", folder, folder], check=True)
        mounted.append(folder)
        subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
        with pytest.raises(OSError):
            open(os.path.join(folder, "probe"), "w").close()

    def thaw() -> None:
        subprocess.run(["umount", mounted.pop()], check=True)

    try:
        yield freeze, thaw
    finally:
        for path in mounted:
            subprocess.run(["umount", "-l", path], check=False)


def can_make_read_only(tmp_path: Path) -> bool:
    """Whether ``read_only_switch`` works here (root in a container may not mount)."""
    if os.geteuid() != 0:
        return True
    probe = str(tmp_path / "mount-probe")
    os.makedirs(probe, exist_ok=True)
    if subprocess.run(["mount", "--bind", probe, probe], capture_output=True).returncode != 0:
        return False
    subprocess.run(["umount", probe], check=True)
    return True


def can_unshare() -> str:
    """An empty string if ``unshare -m`` can mount a tmpfs here, else why not."""
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
