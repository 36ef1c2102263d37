"""The wheel ships ``py.typed`` (PEP 561): type checkers then read dagster_graphbook's own
annotations in a user's project instead of treating the package as untyped."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tests.support.paths import REPO


def test_py_typed_is_in_the_package() -> None:
    assert (REPO / "dagster_graphbook" / "py.typed").is_file()


def test_wheel_ships_py_typed(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "dagster_graphbook/py.typed" in names
    assert "dagster_graphbook_alias.pth" in names  # setup.py's extra file still ships beside it
