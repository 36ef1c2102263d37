"""Discovery of custom node files and lookup of step and resource classes by class name.

Graphbook registers every Step/Resource subclass found in the files of ``custom_nodes/`` under
its bare class name (the ``module`` saved in workflow files is unreliable, so it is never used).
Two different classes with one name make that name ambiguous: the folder still loads (as in
Graphbook, where the later file silently wins), and only a workflow that uses the name fails,
naming both files. A file that fails to import (any error, ``sys.exit()`` included) is recorded
with its line instead of hiding the nodes of the other files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ..authoring import compat, resources, steps

PathLike = Union[str, "os.PathLike[str]"]

BUILTIN_STEPS: Dict[str, type] = {
    c.__name__: c
    for c in (
        steps.Split,
        steps.SplitByItems,
        steps.SplitItemField,
        steps.Copy,
        steps.LoadJSONL,
        steps.DumpJSONL,
    )
}
BUILTIN_RESOURCES: Dict[str, type] = dict(resources.UI_NAMES)
# Also accept the class names of the built-in resources (Python Graphs and hand-written files use
# them).
BUILTIN_RESOURCES.update({c.__name__: c for c in resources.UI_NAMES.values()})


@dataclass(frozen=True)
class NodeImportError:
    """A custom node file that failed to import: where, and why."""

    path: str
    line: Optional[int]
    message: str
    traceback: str

    def __str__(self) -> str:
        where = f"{self.path}, line {self.line}" if self.line else self.path
        return f"custom node file {where} failed to import: {self.message}"


def _base_classes() -> Tuple[Tuple[type, ...], Tuple[type, ...], Tuple[type, ...]]:
    """(step bases, resource bases, abstract bases not to register), real Graphbook's included."""
    step_bases: List[type] = [steps.Step]
    resource_bases: List[type] = [resources.Resource]
    abstract = [v for v in vars(steps).values() if isinstance(v, type)] + [
        v for v in vars(resources).values() if isinstance(v, type)
    ]
    if (
        compat.real_graphbook_installed()
    ):  # pragma: no cover - exercised only where graphbook is installed
        import graphbook.core.resources as gb_resources
        import graphbook.core.steps as gb_steps

        step_bases.append(gb_steps.Step)
        resource_bases.append(gb_resources.Resource)
        abstract += [v for v in vars(gb_steps).values() if isinstance(v, type)]
        abstract += [v for v in vars(gb_resources).values() if isinstance(v, type)]
    return tuple(step_bases), tuple(resource_bases), tuple(abstract)


# (absolute path, content hash) -> module, so reloading definitions in one process keeps classes
# stable.
_MODULE_CACHE: Dict[Tuple[str, str], object] = {}


_NODE_MODULES = "graphbook_custom_nodes"  # the package name node files are imported under
_OURS = __name__.split(".")[0]  # dagster_graphbook: a node folder may be a checkout holding it

# Helper modules that node files imported from their folder (``import my_helpers`` beside them):
# module name -> (its file, that file's content hash when imported). Python keeps a module once
# imported, so a helper edited between two loads in one process would stay old:
# `_drop_stale_helpers` drops them all from sys.modules, and the node files import anew.
_HELPERS: Dict[str, Tuple[str, Optional[str]]] = {}


def _file_hash(path: Union[str, Path]) -> Optional[str]:
    try:
        return hashlib.sha1(Path(path).read_bytes()).hexdigest()
    except OSError:  # deleted since: stale
        return None


def _record_helpers(folder: Path, before: Iterable[str]) -> None:
    """Record the modules a node file's import added whose files are under ``folder``."""
    known = set(before)
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name in known or not file or name.split(".")[0] in (_NODE_MODULES, _OURS):
            continue  # node files have their own cache; this package is never a helper
        if Path(file).resolve().is_relative_to(folder):
            _HELPERS[name] = (file, _file_hash(file))


def _drop_stale_helpers() -> None:
    """Where a helper's file changed since it was imported, drop every recorded helper from
    sys.modules (one may import another) and the cached node modules, so the node files and
    their helpers import anew, in the order the node files import them."""
    if all(_file_hash(file) == digest for file, digest in _HELPERS.values()):
        return
    for name in _HELPERS:
        sys.modules.pop(name, None)
    _HELPERS.clear()
    _MODULE_CACHE.clear()
    importlib.invalidate_caches()


def _module_name(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = "".join(ch if ch.isalnum() else "_" for ch in path.stem)
    return f"{_NODE_MODULES}.m{digest}_{stem}"


def _import_file(path: Path) -> object:
    content_hash = hashlib.sha1(path.read_bytes()).hexdigest()
    cached = _MODULE_CACHE.get((str(path), content_hash))
    if cached is not None:
        return cached
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    vars(module)["__graphbook_file_module__"] = True  # spawned workers cannot import it by name
    sys.modules[name] = module  # pickling by reference (dataclasses, fork-free pools) needs it
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)  # Graphbook lets node files import helpers next to them
    before = list(sys.modules)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
        _record_helpers(path.parent, before)
    _MODULE_CACHE[(str(path), content_hash)] = module
    return module


def _import_error(path: Path, exc: BaseException) -> NodeImportError:
    line = None
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename) == str(path):
        line = exc.lineno
    else:
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if os.path.abspath(frame.filename) == str(path):
                line = frame.lineno
                break
    return NodeImportError(
        str(path), line, import_failure(exc), "".join(traceback.format_exception(exc))
    )


def import_failure(exc: BaseException) -> str:
    """Why importing a file failed, in a line; a ``sys.exit()`` at import says so."""
    if isinstance(exc, SystemExit):
        return (
            f"it called sys.exit({exc.code!r}) while being imported; a file of nodes or a "
            "workflow must not end the program: put script code under "
            "`if __name__ == '__main__':`"
        )
    return f"{type(exc).__name__}: {exc}"


def _module_file(cls: type) -> Optional[str]:
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    return str(Path(file).resolve()) if file else None


def _python_files(paths: Iterable[PathLike]) -> List[Path]:
    files: List[Path] = []
    for p in paths:
        p = Path(p).resolve()
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
                files += [
                    Path(root) / n
                    for n in sorted(names)
                    if n.endswith(".py") and not n.startswith(".")
                ]
        else:
            raise FileNotFoundError(f"custom nodes path {p} does not exist")
    return files


@dataclass
class NodeRegistry:
    """Step and resource classes by name, plus the files that failed to import."""

    steps: Dict[str, type] = field(default_factory=lambda: dict(BUILTIN_STEPS))
    resources: Dict[str, type] = field(default_factory=lambda: dict(BUILTIN_RESOURCES))
    origins: Dict[str, str] = field(default_factory=dict)
    import_errors: List[NodeImportError] = field(default_factory=list)
    ambiguous: Dict[str, List[str]] = field(default_factory=dict)  # class name -> files defining it

    @classmethod
    def load(cls, paths: Sequence[PathLike] = ()) -> NodeRegistry:
        """Import every ``.py`` file under ``paths`` (folders or files) and collect its nodes."""
        compat.install_graphbook_alias()
        _drop_stale_helpers()
        registry = cls()
        step_bases, resource_bases, abstract = _base_classes()
        files = _python_files(paths)
        scanned = {str(f) for f in files}
        for path in files:
            try:
                module = _import_file(path)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # a broken file (even sys.exit()) must not end the load
                registry.import_errors.append(_import_error(path, exc))
                continue
            for obj in list(vars(module).values()):
                if not isinstance(obj, type) or obj in abstract:
                    continue
                if (
                    obj.__module__ != getattr(module, "__name__", None)
                    and _module_file(obj) in scanned
                ):
                    # imported from another node file (maybe under another module name): registered
                    # from there
                    continue
                if issubclass(obj, step_bases):
                    registry._add(registry.steps, obj, str(path))
                elif issubclass(obj, resource_bases):
                    registry._add(registry.resources, obj, str(path))
        return registry

    def _add(self, table: Dict[str, type], node: type, path: str) -> None:
        name = node.__name__
        existing = table.get(name)
        if existing is not None and existing is not node:
            files = self.ambiguous.setdefault(name, [self.origins.get(name, "built-in nodes")])
            if path not in files:
                files.append(path)
            return
        table[name] = node
        self.origins.setdefault(name, path)

    def describe_missing(self, name: str, kind: str) -> str:
        table = self.steps if kind == "step" else self.resources
        msg = f"unknown {kind} {name!r}; known {kind}s: {', '.join(sorted(table)) or '(none)'}"
        if self.import_errors:
            msg += "; note: " + "; ".join(str(e) for e in self.import_errors)
        return msg
