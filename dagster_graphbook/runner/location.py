"""The code location ``materialize`` and ``run_job`` load: which module, and its Definitions."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Union

import dagster as dg

from ..errors import RequestError, error_cause
from ..model.workflow import WorkflowError
from .console import failures_unsaid


@dataclass(frozen=True)
class CodeLocationModule:
    """The module ``materialize`` loads, the folder it is imported from, and where its name came
    from (said when it cannot be loaded)."""

    module: str
    root: Path
    origin: str
    in_project: bool  # read from a dg project's settings


DEFAULT_MODULE = "definitions"  # this repository's layout (workspace.yaml's autoload_defs_module)


def code_location_module(
    module: Optional[str] = None, start: Optional[Path] = None
) -> CodeLocationModule:
    """``module`` if given; else the module ``dg`` loads for the project holding ``start`` (the
    current folder): the nearest ``dg.toml`` or ``pyproject.toml`` with a ``[tool.dg]`` table, up
    from ``start`` (dg's own discovery), its ``[tool.dg.project] code_location_target_module``,
    else ``<root_module>.definitions``; else ``definitions`` here. Imported from the project's
    folder where there is one."""
    from dagster_shared.utils.config import (
        detect_dg_config_file_format,
        discover_config_file,
        load_toml_as_dict,
    )

    here = (start or Path.cwd()).absolute()
    found = discover_config_file(here)
    project: Dict[str, Any] = {}
    if found is not None:
        toml = load_toml_as_dict(found)
        node = toml if detect_dg_config_file_format(found) == "root" else toml["tool"]["dg"]
        project = node.get("project") or {}
    if module is not None:
        root = found.parent if found is not None and project else here
        return CodeLocationModule(module, root, "--module", False)
    if found is None or not project.get("root_module"):
        return CodeLocationModule(DEFAULT_MODULE, here, "the default, outside a dg project", False)
    table = "[project]" if detect_dg_config_file_format(found) == "root" else "[tool.dg.project]"
    if project.get("code_location_target_module"):
        origin = f"code_location_target_module in {table} of {found}"
        target = project["code_location_target_module"]
        return CodeLocationModule(target, found.parent, origin, True)
    origin = f"root_module {project['root_module']!r} + '.definitions', {table} of {found}"
    return CodeLocationModule(f"{project['root_module']}.definitions", found.parent, origin, True)


def load_code_location(module: Union[None, str, CodeLocationModule] = None) -> dg.Definitions:
    """The Definitions of a code location module (``code_location_module(module)``): its
    ``dg.Definitions``, or the one its ``@dg.definitions`` function returns (the layout ``dg``
    scaffolds), or, for a package without either, its autoloaded Python modules and
    ``defs.yaml`` components."""
    import importlib
    import sys

    target = module if isinstance(module, CodeLocationModule) else code_location_module(module)
    for folder in dict.fromkeys([str(target.root), os.getcwd()]):
        if folder not in sys.path:
            sys.path.insert(0, folder)  # as `dg` and `dagster dev` import it
    name = target.module
    try:
        mod = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(f"{exc.name}.")):
            raise  # a module the code location imports is missing: its traceback helps
        fix = "run from the project's folder" if target.origin == "--module" else "correct it"
        raise RequestError(
            f"no code location module {name!r} ({target.origin}) in {target.root}: {fix}, or "
            "name the module that holds its Definitions with --module"
        ) from exc
    found = _definitions_in(mod)
    if found is not None:
        return found
    if not hasattr(mod, "__path__"):  # a module, not a package: nothing to autoload
        raise RequestError(
            f"code location module {name!r} ({target.origin}) holds no dg.Definitions and no "
            "@dg.definitions function: name the module that does with --module"
        )
    return _autoload(mod, target)


def _autoload(mod: Any, target: CodeLocationModule) -> dg.Definitions:
    """Package ``mod``'s Python modules and ``defs.yaml`` components (``load_defs``); a package
    that is no such folder (``--module photos``, the project's root module) is said in a line,
    with the module the project names."""
    import warnings

    from dagster.components import load_defs
    from dagster.components.core.load_defs import get_project_root

    try:
        root = get_project_root(mod)
    except FileNotFoundError:  # a deployed folder without pyproject.toml: its root is here
        root = Path(os.getcwd())
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DeprecationWarning
        )  # load_defs: fine for a package, no dg project needed
        try:
            return load_defs(mod, project_root=root)
        except Exception as exc:
            wrong = error_cause(exc, dg.DagsterInvariantViolationError)
            if wrong is None or error_cause(exc, (WorkflowError, RequestError)) is not None:
                raise  # a component's own error (said as it is), or a bug (its traceback helps)
            project = code_location_module()
            hint = (
                f"the project's is {project.module!r} ({project.origin})"
                if project.in_project and project.module != target.module
                else "name the module that holds its Definitions with --module"
            )
            raise RequestError(
                f"code location module {target.module!r} ({target.origin}) does not load as a "
                f"package of definitions ({wrong}); {hint}"
            ) from exc


def _definitions_in(mod: Any) -> Optional[dg.Definitions]:
    """The ``dg.Definitions`` at module scope of ``mod``, or what its ``@dg.definitions``
    function returns (called as Dagster calls it, without a context); None if it has neither."""
    from dagster.components.definitions import LazyDefinitions

    values = list(vars(mod).values())
    lazy = [v for v in values if isinstance(v, LazyDefinitions)]
    if lazy:
        loaded = lazy[0]()
        if isinstance(loaded, dg.Definitions):
            return loaded
    defs = getattr(mod, "defs", None)
    if isinstance(defs, dg.Definitions):
        return defs
    return next((v for v in values if isinstance(v, dg.Definitions)), None)


def reconstruct_location_job(module: str, job_name: str) -> dg.JobDefinition:
    """Rebuild job ``job_name`` of code location ``module`` (a resumed run's steps)."""
    return failures_unsaid(load_code_location(module).resolve_job_def(job_name))
