"""The public surface, locked: ``dagster_graphbook`` exports its Dagster face, sorted, and nothing
else; every name the README and the docs import or name resolves."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import dagster_graphbook

REPO = Path(__file__).resolve().parents[1]

# The Dagster face. Changing it is an API change: edit this list on purpose, and the docs.
FACE = [
    "EncodedImage",  # what encoded_image returns (a load_fn's image, decoded on the device)
    "FolderSensor",
    "GraphbookError",
    "GraphbookTranslator",
    "GraphbookWorkflow",
    "GraphbookWorkflowComponent",
    "NodeRegistry",
    "StepCheck",
    "Workflow",
    "WorkflowError",
    "build_definitions",
    "daily_partitions",
    "encoded_image",
    "graphbook_executor",
    "load_workflow",
    "run_workflow",
]


def test_the_top_level_exports_the_dagster_face_sorted():
    assert dagster_graphbook.__all__ == FACE
    assert FACE == sorted(FACE)


def test_every_public_top_level_attribute_is_in_all():
    """Nothing public leaks onto the top level beside ``__all__`` (the stage packages aside)."""
    stages = {"authoring", "cli", "defs", "errors", "execution", "integrations", "model"}
    stages |= {"plan", "runner", "store", "dagster_internals"}
    public = {
        name
        for name, value in vars(dagster_graphbook).items()
        if not name.startswith("_") and name not in stages and name != "annotations"
    }
    assert public == set(FACE)


def test_the_face_imports_without_warnings_in_a_fresh_interpreter():
    code = f"from dagster_graphbook import {', '.join(FACE)}; import dagster_graphbook.authoring"
    run = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:dagster_graphbook", "-c", code],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        dagster_graphbook.nope  # noqa: B018


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


_IMPORT = re.compile(r"^\s*from (dagster_graphbook[\w.]*) import (\([^)]*\)|[^\n#]+)", re.M)
_DOTTED = re.compile(r"`(dagster_graphbook(?:\.\w+)+)")


def _documented_names() -> set[tuple[str, str]]:
    found = set()
    for doc in _documents():
        text = doc.read_text()
        for module, names in _IMPORT.findall(text):
            for name in names.strip("()").replace("\n", " ").split(","):
                if name.strip():
                    found.add((module, name.split(" as ")[0].strip()))
        for dotted in _DOTTED.findall(text):
            module, _, name = dotted.rpartition(".")
            found.add((module, name))
    return found


def _resolve(module: str, name: str) -> object:
    """``module.name``, where ``module`` may itself be a module attribute chain."""
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:] + [name]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                obj = importlib.import_module(f"{obj.__name__}.{attr}")
        return obj
    raise ModuleNotFoundError(module)


def test_every_name_the_docs_import_still_resolves():
    names = _documented_names()
    assert len(names) >= 8, "the documents' imports were not found"
    broken = []
    for module, name in sorted(names):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                _resolve(module, name)
            except (ImportError, AttributeError) as exc:
                broken.append(f"{module}.{name}: {exc}")
    assert broken == []
