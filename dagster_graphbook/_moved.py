"""Old paths keep working, with a ``DeprecationWarning`` naming the new place.

Modules: the package was laid out by stage (model, plan, defs, execution, store, cli,
integrations), so ``import dagster_graphbook.workflow`` and the like are redirected.
Names: ``dagster_graphbook`` itself exports only its Dagster face; the Graphbook authoring names
it used to export (``step``, ``BatchStep``, ...) live in ``dagster_graphbook.authoring``, as they
do in ``graphbook``, and reach the old spelling through the package's ``__getattr__``."""

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
    "checks": "plan.checks",
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


_AUTHORING = f"{_PACKAGE}.authoring"
_AUTHORING_NAMES = (
    "Graph Note batch event log output param prompt prompts resource resources source"
)
# names the package's top level exported before its surface became the Dagster face
MOVED_NAMES = {
    **{name: _AUTHORING for name in (_AUTHORING_NAMES + " step steps utils").split()},
    **{
        name: f"{_AUTHORING}.steps"
        for name in "BatchStep Copy DumpJSONL GeneratorSourceStep LoadJSONL SourceStep Split "
        "SplitByItems SplitItemField Step StepOutput".split()
    },
    **{
        name: f"{_AUTHORING}.resources"
        for name in "DictResource FunctionResource ListResource NumberResource Resource".split()
    },
    "atomic_path": f"{_AUTHORING}.files",
}


def moved_name(name: str) -> Any:
    """The object a moved top-level name now lives at, with a warning saying where."""
    if name not in MOVED_NAMES:
        raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")
    where = MOVED_NAMES[name]
    warnings.warn(
        f"{_PACKAGE}.{name} moved: import it from {where} (the package's top level is its "
        f"Dagster face)",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(where), name)


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
