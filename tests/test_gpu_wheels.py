"""The wheels carried to a lent GPU machine (benchmarks/gpu/wheels.txt) must cover dagster's and
dagster_graphbook's requirements there: the device has no network, so a gap would surface only
minutes into a scarce lease. benchmarks/gpu/closure.py checks it here, offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

CLOSURE = REPO / "benchmarks" / "gpu" / "closure.py"


def closure(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CLOSURE), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_carried_wheels_cover_the_closure_and_the_imports() -> None:
    # the imports and a one-op run too: a module Dagster or we import undeclared would be missed
    result = closure("--imports", "dagster_graphbook", "definitions", "--run-job")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "closure: OK" in result.stdout
    assert "dagster" in result.stdout.split("closure: ", 1)[1].split(", ")


def test_a_missing_wheel_fails_naming_who_needs_it(tmp_path: Path) -> None:
    pins = (REPO / "benchmarks" / "gpu" / "wheels.txt").read_text().splitlines()
    short = tmp_path / "wheels.txt"
    short.write_text("\n".join(p for p in pins if not p.startswith("pydantic==")) + "\n")
    result = closure("--list", str(short))
    assert result.returncode == 1, result.stdout
    assert "FAIL: pydantic<3.0.0,>=2 (required by dagster-shared" in result.stdout
