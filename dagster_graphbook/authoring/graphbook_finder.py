"""Lets ``import graphbook`` work in any Python of the environment, real Graphbook first.

``dagster_graphbook_alias.pth`` (installed into site-packages with the package) runs
``install()`` at interpreter start, so ``python SampleWorkflow.py`` with Graphbook's imports
runs without Graphbook installed. The finder is appended *after* the normal path finder: a
real ``graphbook`` package is found first and always wins; only when none exists does this
finder answer, with dagster-graphbook's API. This file is loaded by path at startup, so it
imports nothing from the package until ``graphbook`` is actually imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Optional, Sequence


class GraphbookAliasLoader(importlib.abc.Loader):
    """Replaces the module being imported with dagster-graphbook's alias of it."""

    dagster_graphbook_alias = True  # compat.real_graphbook_installed() ignores specs it makes

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[types.ModuleType]:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        from dagster_graphbook.authoring import compat

        name = module.__name__
        if sys.modules.get(name) is module:
            del sys.modules[name]  # the placeholder: the alias registers the real objects
        # the import system returns what sys.modules holds
        sys.modules[name] = compat.alias_module(name)


class GraphbookAliasFinder(importlib.abc.MetaPathFinder):
    """Answers for ``graphbook`` and its submodules when no real Graphbook is on the path."""

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[types.ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != "graphbook" and not fullname.startswith("graphbook."):
            return None
        try:
            from dagster_graphbook.authoring import compat
        except ImportError:
            return None
        if fullname not in compat.ALIAS_NAMES:
            return None
        is_package = any(n.startswith(fullname + ".") for n in compat.ALIAS_NAMES)
        return importlib.machinery.ModuleSpec(
            fullname, GraphbookAliasLoader(), is_package=is_package
        )


def install() -> None:
    """Append the finder once (after the path finder, so a real Graphbook is found first)."""
    if not any(type(f).__name__ == "GraphbookAliasFinder" for f in sys.meta_path):
        sys.meta_path.append(GraphbookAliasFinder())
