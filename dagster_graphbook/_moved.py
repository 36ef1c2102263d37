"""Old module paths: the package was laid out by stage (model, plan, defs, execution, store,
cli, integrations); ``import dagster_graphbook.workflow`` and the like keep working, with a
``DeprecationWarning`` naming the module's new place."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any, Optional

_PACKAGE = __name__.rpartition(".")[0]

# modules that moved when the package was laid out by stage: old name -> new place
_MOVED = {
    "assets": "defs.assets",
    "automation": "defs.automation",
    "checks": "defs.checks",
    "code_version": "plan.code_version",
    "component": "defs.component.component",
    "component_translation": "defs.component.translation",
    "dask_executor": "integrations.dask",
    "dead_runs": "execution.dead_runs",
    "definitions": "defs.definitions",
    "docstrings": "plan.docstrings",
    "executor": "defs.executor",
    "flatten": "model.flatten",
    "gpus": "plan.gpus",
    "io": "store.io_manager",
    "load_errors": "defs.load_errors",
    "manifests": "store.manifests",
    "node_info": "plan.node_info",
    "notes_codec": "store.codec",
    "params": "model.params",
    "registry": "model.registry",
    "runner": "cli.run",
    "scaffold": "defs.component.scaffold",
    "schedules": "defs.schedules",
    "step_kinds": "plan.step_kinds",
    "tables": "store.tables",
    "translator": "plan.translator",
    "trust": "plan.trust",
    "versions": "store.versions",
    "workflow": "model.workflow",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import dagster_graphbook.workflow`` and the like keep working, with a warning naming
    the module's new place."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Optional[Any]:
        package, _, old = fullname.rpartition(".")
        moved = package == _PACKAGE and old in _MOVED
        return importlib.util.spec_from_loader(fullname, self) if moved else None

    def create_module(self, spec: Any) -> Any:
        new = f"{_PACKAGE}.{_MOVED[spec.name.removeprefix(_PACKAGE + '.')]}"
        warnings.warn(f"{spec.name} moved to {new}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: Any) -> None:
        """The module was imported under its new name."""


def install_moved_modules() -> None:
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())  # before an editable install's finder
