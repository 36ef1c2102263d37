"""Make ``import graphbook`` (and its submodules) resolve to this API when Graphbook is absent.

Covers graphbook 0.13.3's authoring surface (``graphbook.core.*``, ``graphbook.core.plugins``, the
executors; checked against the real package by ``tests/conformance/test_fidelity.py``) and the paths
Graphbook's docs import but 0.13.3 does not ship (``graphbook.steps``, ``graphbook.utils``, ...).
``graphbook_finder`` makes these importable in a fresh interpreter too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Dict


def real_graphbook_installed() -> bool:
    existing = sys.modules.get("graphbook")
    if existing is not None:
        return not getattr(existing, "__dagster_graphbook_alias__", False)
    try:
        spec = importlib.util.find_spec("graphbook")
    except (ImportError, ValueError):
        return False
    return spec is not None and not getattr(spec.loader, "dagster_graphbook_alias", False)


def _module(name: str, doc: str, **attrs: object) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    module.__dict__.update(attrs)
    return module


def _alias_modules() -> Dict[str, types.ModuleType]:
    """Module name -> module for each ``graphbook`` path node files, plugins, workflows use."""
    from . import decorators, executors, graph, note, plugins, prompts, resources, steps, utils

    authoring = sys.modules[__package__]  # this package, whose public names graphbook's are
    # ``authoring.log`` is the function; the module is needed here
    log_module = importlib.import_module(__package__ + ".log")

    execs = {"Executor": executors.Executor, "DefaultExecutor": executors.DefaultExecutor}
    public = {
        k: getattr(authoring, k)
        for k in (
            "Graph",
            "Note",
            "batch",
            "event",
            "log",
            "output",
            "param",
            "prompt",
            "resource",
            "source",
            "step",
        )
    }
    helpers = {
        k: getattr(utils, k)
        for k in ("transform_function_string", "is_batchable", "convert_dict_values_to_list")
    }
    core = _module(
        "graphbook.core",
        "graphbook.core (dagster-graphbook alias)",
        **public,
        **execs,
        steps=steps,
        resources=resources,
        utils=utils,
        decorators=decorators,
        note=note,
        prompts=prompts,
        serialization=graph,
        plugins=plugins,
    )
    processing = _module("graphbook.core.processing", "Graphbook's processors (only the executors)")
    graph_processor = _module(
        "graphbook.core.processing.graph_processor",
        "Graphbook executors",
        **execs,
        **{
            k: getattr(steps, k)
            for k in ("Step", "SourceStep", "GeneratorSourceStep", "AsyncStep", "BatchStep", "log")
        },
        transform_json_log=log_module.transform_json_log,
    )
    serialization = _module(
        "graphbook.core.serialization",
        "Graphbook's Graph API",
        **execs,
        steps=steps,
        resources=resources,
        **{k: getattr(graph, k) for k in graph.__all__},
    )
    steps_base = _module(
        "graphbook.core.steps.base",
        "Graphbook's step classes",
        **vars_of(steps),
        **helpers,
        transform_json_log=log_module.transform_json_log,
        prompts=prompts,
        prompt=decorators.prompt,
    )
    steps_io = _module(
        "graphbook.core.steps.io",
        "LoadJSONL, DumpJSONL",
        LoadJSONL=steps.LoadJSONL,
        DumpJSONL=steps.DumpJSONL,
        SourceStep=steps.SourceStep,
        Step=steps.Step,
    )
    resources_base = _module(
        "graphbook.core.resources.base",
        "Graphbook's resource classes",
        **vars_of(resources),
        log=log_module.log,
    )
    for target, extra in (
        (steps, {"base": steps_base, "io": steps_io}),
        (resources, {"base": resources_base}),
        (utils, {"Note": note.Note, "transform_json_log": log_module.transform_json_log}),
        (
            prompts,
            {"prompt": decorators.prompt, "transform_json_log": log_module.transform_json_log},
        ),
        (
            decorators,
            {
                "steps": steps,
                "resources": resources,
                "transform_function_string": utils.transform_function_string,
            },
        ),
    ):
        for key, value in extra.items():
            if not hasattr(target, key):
                setattr(target, key, value)
    return {
        "graphbook": authoring,
        "graphbook.core": core,
        "graphbook.steps": steps,
        "graphbook.core.steps": steps,
        "graphbook.core.steps.base": steps_base,
        "graphbook.core.steps.io": steps_io,
        "graphbook.resources": resources,
        "graphbook.core.resources": resources,
        "graphbook.core.resources.base": resources_base,
        "graphbook.utils": utils,
        "graphbook.core.utils": utils,
        "graphbook.decorators": decorators,
        "graphbook.core.decorators": decorators,
        "graphbook.note": note,
        "graphbook.core.note": note,
        "graphbook.prompts": prompts,
        "graphbook.core.prompts": prompts,
        "graphbook.plugins": plugins,
        "graphbook.core.plugins": plugins,
        "graphbook.core.processing": processing,
        "graphbook.core.processing.graph_processor": graph_processor,
        "graphbook.core.serialization": serialization,
        "graphbook.logging": log_module,
        "graphbook.logging.torch": _module(
            "graphbook.logging.torch",
            "graphbook.logging.torch (importable; its loggers are not supported)",
            TransformsLogger=log_module.TransformsLogger,
            TensorDAGNodeRef=log_module.TensorDAGNodeRef,
        ),
    }


def vars_of(module: types.ModuleType) -> Dict[str, object]:
    """The public classes and functions a module lists in ``__all__``."""
    return {k: getattr(module, k) for k in getattr(module, "__all__", ()) if hasattr(module, k)}


# Aliases imported only when a program imports them: ``graphbook.ray`` imports Ray and dagster-ray
# (the ``ray`` extra), which ``import graphbook`` must not need.
LAZY_ALIASES = {"graphbook.ray": "dagster_graphbook.authoring.ray_api"}

ALIAS_NAMES = frozenset(
    {
        *LAZY_ALIASES,
        "graphbook",
        "graphbook.core",
        "graphbook.steps",
        "graphbook.core.steps",
        "graphbook.core.steps.base",
        "graphbook.core.steps.io",
        "graphbook.resources",
        "graphbook.core.resources",
        "graphbook.core.resources.base",
        "graphbook.utils",
        "graphbook.core.utils",
        "graphbook.decorators",
        "graphbook.core.decorators",
        "graphbook.note",
        "graphbook.core.note",
        "graphbook.prompts",
        "graphbook.core.prompts",
        "graphbook.plugins",
        "graphbook.core.plugins",
        "graphbook.core.processing",
        "graphbook.core.processing.graph_processor",
        "graphbook.core.serialization",
        "graphbook.logging",
        "graphbook.logging.torch",
    }
)


def install_graphbook_alias() -> bool:
    """Register the alias modules; False (and nothing done) when real Graphbook is installed.

    The lazy ones (``LAZY_ALIASES``) are left to ``graphbook_finder`` (installed when this
    package is imported, if the interpreter's startup hook did not), which imports them on first
    use."""
    if real_graphbook_installed():
        return False
    if "graphbook" in sys.modules:
        return True
    modules = _alias_modules()
    assert set(modules) == ALIAS_NAMES - set(LAZY_ALIASES)
    for name, module in modules.items():
        sys.modules.setdefault(name, module)
    for name, module in modules.items():  # attribute access after import: graphbook.core.steps.Step
        parent, _, child = name.rpartition(".")
        if parent and not hasattr(modules[parent], child):
            setattr(modules[parent], child, module)
    return True


def alias_module(name: str) -> types.ModuleType:
    """The alias module ``name`` (one of ``ALIAS_NAMES``), importing a lazy one (whose missing
    dependencies raise its ImportError here, as ``import graphbook.ray`` does in Graphbook)."""
    install_graphbook_alias()
    if name in LAZY_ALIASES:
        return importlib.import_module(LAZY_ALIASES[name])
    return sys.modules[name]
