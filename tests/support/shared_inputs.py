"""An expensive input made once per test run, whatever the number of pytest-xdist workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Tuple

import pytest


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]
) -> Tuple[Path, Any]:
    """``make(folder)`` once per test run, and ``(folder, what it returned)``.

    Session fixtures are made once per process, and ``pytest -n`` (scripts/test.sh) runs one
    process per worker: an expensive input (a trained checkpoint, a wheel) is made by the first
    worker that needs it, in the run's shared temporary folder, while the others wait for it
    (pytest-xdist's recipe). ``make``'s result must be JSON. Tests only read the folder, or
    write where no other test module does."""
    import fcntl
    import os
    import shutil

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    folder, made = shared / name, shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed try left
            folder.mkdir()
            made.write_text(json.dumps(make(folder)))
    return folder, json.loads(made.read_text())
