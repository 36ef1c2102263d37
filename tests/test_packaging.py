"""The wheel ships ``py.typed`` (PEP 561): type checkers then read dagster_graphbook's own
annotations in a user's project instead of treating the package as untyped."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
# what a wheel build reads (copied out, so the build leaves nothing in the checkout)
BUILD_INPUTS = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "dagster_graphbook_alias.pth",
)


def test_py_typed_is_in_the_package() -> None:
    assert (REPO / "dagster_graphbook" / "py.typed").is_file()


def test_wheel_ships_py_typed(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="the wheel is built without build isolation")
    src = tmp_path / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "dagster_graphbook",
        src / "dagster_graphbook",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + [str(src), "-w", str(tmp_path / "dist")],
        check=True,
        timeout=300,
    )
    (built,) = (tmp_path / "dist").glob("dagster_graphbook-*.whl")
    names = zipfile.ZipFile(built).namelist()
    assert "dagster_graphbook/py.typed" in names
    assert "dagster_graphbook_alias.pth" in names  # setup.py's extra file still ships beside it
