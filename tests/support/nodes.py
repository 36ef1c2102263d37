"""Node files under tests/nodes/ (Graphbook steps and resources as users write them), put where a
test runs them: each test gets its own copy in its temporary folder, named as the test needs,
so that a test may edit its copy and two node files never share a folder by accident."""

from __future__ import annotations

import shutil
from pathlib import Path

NODES = Path(__file__).resolve().parent.parent / "nodes"


def node_file(module: str) -> Path:
    """tests/nodes/<module>.py."""
    path = NODES / f"{module}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no node module {module!r} in {NODES}")
    return path


def node_source(module: str) -> str:
    """The text of tests/nodes/<module>.py, for a test that edits it before writing it."""
    return node_file(module).read_text()


def copy_nodes(folder: Path, filename: str, module: str) -> Path:
    """Copy tests/nodes/<module>.py into ``folder`` as ``filename`` and return the folder (what
    ``custom_nodes`` takes)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(node_file(module), folder / filename)
    return folder
