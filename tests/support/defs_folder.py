"""A defs folder loaded the way Dagster loads one (``dagster.components.load_defs``)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg


def load_defs_folder(tmp_path: Path, package: str, yaml_by_folder: dict) -> dg.Definitions:
    """A project in ``tmp_path`` (pyproject.toml + package ``package``) with one defs.yaml per
    folder."""
    from dagster.components import load_defs

    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "{package}"\nversion = "0"\n')
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    for folder, text in yaml_by_folder.items():
        (root / folder).mkdir()
        (root / folder / "defs.yaml").write_text(textwrap.dedent(text))
    sys.path.insert(0, str(tmp_path))
    try:
        return load_defs(importlib.import_module(package), project_root=tmp_path)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]
