"""Code versions and code references of a workflow node's assets.

Dagster marks an asset "Unsynced" when its definition's ``code_version`` differs from the one its
latest materialization recorded. A node's version is a hash of what decides its output: the
step class's source, the file that defines it (helpers the step calls usually live there too),
and the parameter values the workflow sets. Code references point the UI at the class's file
and line and at the node in the workflow file.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import re
import sysconfig
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import dagster as dg

from ..model.workflow import Workflow, WorkflowNode


# Per class, not per node: a workflow uses one class for many nodes, and ``inspect`` parses the
# class's whole module to find it (building a 1,000-step chain parsed it 2,000 times).
@functools.lru_cache(maxsize=256)
def _source_file(cls: type) -> Optional[Path]:
    try:
        name = inspect.getsourcefile(cls)
    except TypeError:  # built-in or generated without a file
        return None
    return Path(name) if name and Path(name).is_file() else None


def _user_functions(cls: type) -> List[Any]:
    """The functions a decorated step was made from (Graphbook's ``@step`` builds the class)."""
    path = _source_file(cls)
    found = []
    for value in vars(cls).values():
        code = getattr(value, "__code__", None)
        if code is not None and path is not None and Path(code.co_filename) == path:
            found.append(value)
    return sorted(found, key=lambda f: f.__code__.co_firstlineno)


def _file_stamp(path: Optional[Path]) -> Tuple[int, int]:
    """A file's mtime and size: what caches of its contents are keyed by, so an edit (which a
    reload of the code location may not turn into a new class) is read anew."""
    if path is None:
        return (0, 0)
    stat = path.stat()
    return (stat.st_mtime_ns, stat.st_size)


def class_source(cls: type) -> str:
    """The class's source (cached per class and file version)."""
    return _class_source(cls, _file_stamp(_source_file(cls)))


@functools.lru_cache(maxsize=256)
def _class_source(cls: type, stamp: Tuple[int, int]) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):  # built by a decorator: the functions it was made from
        parts = []
        for fn in _user_functions(cls):
            try:
                parts.append(inspect.getsource(fn))
            except (OSError, TypeError):
                parts.append(fn.__qualname__)
        return "\n".join(parts) or f"{cls.__module__}.{cls.__qualname__}"


def node_code_version(node: WorkflowNode) -> str:
    """A short hash of the class source, its module file and the node's parameter values."""
    digest = hashlib.sha256()
    path = _source_file(node.cls)
    digest.update(_class_source(node.cls, _file_stamp(path)).encode())
    if path is not None:
        digest.update(_file_bytes(path, _file_stamp(path)))
    values = json.dumps(node.values, sort_keys=True, default=stable_repr)
    digest.update(values.encode())
    digest.update(json.dumps(sorted(node.resource_params.items())).encode())
    return digest.hexdigest()[:16]


def class_code_version(cls: type) -> Optional[str]:
    """A short hash of the code of a step or resource class, for incremental runs: its source,
    its module file, the other modules of that folder (helpers it imports) and the files of its
    base classes outside installed packages; None when its source cannot be found (a class made
    by ``exec``: its edits would go unseen)."""
    path = class_file(cls)
    if path is None:
        return None
    digest = hashlib.sha256()
    digest.update(_class_source(cls, _file_stamp(path)).encode())
    files = {path, *_folder_modules(path.parent)}
    files |= {f for base in cls.__mro__[1:] if (f := _source_file(base)) and _user_code(f)}
    for file in sorted(files):
        try:
            code = _file_bytes(file, _file_stamp(file))
        except OSError:  # gone since listed (an editor's temporary file)
            continue
        digest.update(str(file).encode() + code)
    return digest.hexdigest()[:16]


_MAX_MODULES = 1000  # a node folder with more modules: its top level only
_NOT_CODE = {"__pycache__", "site-packages", "node_modules", "venv"}


def _folder_modules(folder: Path) -> List[Path]:
    """The ``.py`` files under a node's folder, its subpackages too (the helpers it imports),
    regular files only (an editor's lock file, ``.#steps.py``, is a dangling link): hidden
    folders, caches and virtual environments left out."""
    found: List[Path] = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith(".") and d not in _NOT_CODE
            and not os.path.exists(os.path.join(root, d, "pyvenv.cfg"))
        )  # fmt: skip
        for name in sorted(names):
            full = Path(root) / name
            if name.endswith(".py") and not name.startswith(".") and full.is_file():
                found.append(full)
        if len(found) > _MAX_MODULES:
            return sorted(p for p in folder.glob("*.py") if p.is_file() and p.name[0] != ".")
    return found


def class_file(cls: type) -> Optional[Path]:
    """The file that defines ``cls``: its module's, else the file its methods were compiled from."""
    return _source_file(cls) or _defining_file(cls)


def _defining_file(cls: type) -> Optional[Path]:
    """The file a class's methods were compiled from, where its module is not importable by
    name (a workflow ``.py`` file loaded from its path)."""
    for value in vars(cls).values():
        function = getattr(value, "__func__", value)
        code = getattr(function, "__code__", None)
        if code is not None and Path(code.co_filename).is_file():
            return Path(code.co_filename)
    return None


@functools.lru_cache(maxsize=1)
def _installed() -> Tuple[str, ...]:
    """Folders of installed code (the standard library, site-packages, this package)."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.add(str(Path(__file__).resolve().parents[1]))
    return tuple(sorted(roots))


def _user_code(path: Path) -> bool:
    resolved = str(path.resolve())
    return not any(resolved.startswith(root) for root in _installed())


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_repr(value: Any) -> Any:
    """A value JSON cannot hold, the same in every process that loads the same code (shards in
    step processes of their own compare it): a set sorted (its order changes with each
    process's hash seed), else its repr without a memory address (a function a ``Graph``
    passes)."""
    if isinstance(value, (set, frozenset)):
        return sorted(_ADDRESS.sub("", repr(v)) for v in value)
    return _ADDRESS.sub("", repr(value))


@functools.lru_cache(maxsize=256)
def _file_bytes(path: Path, stamp: Tuple[int, int]) -> bytes:
    """A node file's bytes (``stamp``: its mtime and size, so an edit is read anew)."""
    return path.read_bytes()


@functools.lru_cache(maxsize=256)
def _class_line(cls: type, stamp: Tuple[int, int]) -> int:
    try:
        return inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        functions = _user_functions(cls)
        return functions[0].__code__.co_firstlineno if functions else 1


_ID = re.compile(r'"id"\s*:\s*"?([^"\n,}]*?)"?\s*[,}\n]')


@functools.lru_cache(maxsize=16)
def _id_lines(path: Path, stamp: Tuple[int, int]) -> Tuple[str, Dict[str, int]]:
    """The text of a JSON workflow and the line of each ``"id"`` value's first occurrence, in one
    pass (``stamp``: the file's mtime and size; a search per node made big workflows quadratic)."""
    text = path.read_text(encoding="utf-8")
    lines: Dict[str, int] = {}
    line, pos = 1, 0
    for match in _ID.finditer(text):
        line += text.count("\n", pos, match.start())
        pos = match.start()
        lines.setdefault(match.group(1), line)
    return text, lines


def _node_line(workflow: Workflow, node: WorkflowNode) -> int:
    """The line of the node's ``"id"`` in a JSON workflow (1 when not found)."""
    path = workflow.path
    if path is None or path.suffix != ".json":
        return 1
    stat = path.stat()
    text, lines = _id_lines(path, (stat.st_mtime_ns, stat.st_size))
    if node.id in lines:
        return lines[node.id]
    # an id the one-pass pattern cannot hold (a quote, comma, brace or newline in it)
    match = re.search(r'"id"\s*:\s*"?' + re.escape(node.id) + r'"?\s*[,}\n]', text)
    return text.count("\n", 0, match.start()) + 1 if match else 1


def node_code_references(workflow: Workflow, node: WorkflowNode) -> dg.CodeReferencesMetadataValue:
    """References to the step class (file and line) and to the node in the workflow file."""
    with warnings.catch_warnings():  # beta in Dagster 1.13; the UI shows them all the same
        warnings.simplefilter("ignore", dg.BetaWarning)
        return _code_references(workflow, node)


def _code_references(workflow: Workflow, node: WorkflowNode) -> dg.CodeReferencesMetadataValue:
    refs: List[Any] = []
    path = _source_file(node.cls)
    if path is not None:
        refs.append(
            dg.LocalFileCodeReference(
                file_path=str(path.resolve()),
                line_number=_class_line(node.cls, _file_stamp(path)),
                label=f"{node.name} (step class)",
            )
        )
    if workflow.path is not None:
        refs.append(
            dg.LocalFileCodeReference(
                file_path=str(workflow.path.resolve()),
                line_number=_node_line(workflow, node),
                label=f"{workflow.path.name}: node {node.id}",
            )
        )
    return dg.CodeReferencesMetadataValue(code_references=refs)
