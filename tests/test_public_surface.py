"""The public surface, locked: ``dagster_graphbook`` exports its Dagster face, sorted; the names
and modules that moved keep working with a ``DeprecationWarning``; every name the README and the
docs import or name still resolves (issue 23)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import dagster_graphbook
from dagster_graphbook._moved import _MOVED, MOVED_NAMES

REPO = Path(__file__).resolve().parents[1]

# The Dagster face. Changing it is an API change: edit this list on purpose, and the docs.
FACE = [
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
    public.discard("Any")  # typing, for the module __getattr__'s signature
    assert public == set(FACE)


def test_the_face_imports_without_warnings_in_a_fresh_interpreter():
    code = f"from dagster_graphbook import {', '.join(FACE)}; import dagster_graphbook.authoring"
    run = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:dagster_graphbook", "-c", code],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("name", sorted(MOVED_NAMES))
def test_a_moved_name_still_imports_and_warns_where_it_went(name):
    where = MOVED_NAMES[name]
    with pytest.warns(DeprecationWarning, match=rf"dagster_graphbook\.{name} moved: .*{where}"):
        value = getattr(dagster_graphbook, name)
    assert value is getattr(importlib.import_module(where), name)
    assert name not in dagster_graphbook.__all__


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        dagster_graphbook.nope  # noqa: B018


def test_every_moved_module_still_imports_and_warns():
    """One fresh interpreter for all of them: the old paths must work before anything else ran."""
    code = (
        "import importlib, json, sys, warnings\n"
        "moved = json.loads(sys.argv[1])\n"
        "bad = []\n"
        "for old, new in moved.items():\n"
        "    with warnings.catch_warnings(record=True) as seen:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module('dagster_graphbook.' + old)\n"
        "    said = [str(w.message) for w in seen]\n"
        "    if module is not importlib.import_module('dagster_graphbook.' + new):\n"
        "        bad.append(old + ' is not ' + new)\n"
        "    if not any('moved to dagster_graphbook.' + new in m for m in said):\n"
        "        bad.append(old + ' did not warn: ' + repr(said))\n"
        "print(json.dumps(bad))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(_MOVED)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []


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


def test_the_docs_import_nothing_through_a_moved_path():
    """The documents teach the new places; the old ones are for code written before."""
    stale = sorted(
        f"{module}.{name}"
        for module, name in _documented_names()
        if (module == "dagster_graphbook" and name in MOVED_NAMES)
        or module.removeprefix("dagster_graphbook.").split(".")[0] in _MOVED
    )
    assert stale == []
