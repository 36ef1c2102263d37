"""Make ``import graphbook`` (and its submodules) resolve to this API when Graphbook is absent.

Graphbook's own docs import ``graphbook.steps``/``graphbook.utils``/... which 0.13.3 does not
ship; all of them are registered here so such code runs unchanged.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def real_graphbook_installed() -> bool:
    existing = sys.modules.get("graphbook")
    if existing is not None:
        return not getattr(existing, "__dagster_graphbook_alias__", False)
    return importlib.util.find_spec("graphbook") is not None


def install_graphbook_alias() -> bool:
    """Register the alias modules; returns False (and does nothing) if real Graphbook is installed."""
    if real_graphbook_installed():
        return False
    if "graphbook" in sys.modules:
        return True
    from .. import authoring
    from . import decorators, graph, note, resources, steps, utils
    from . import log as log_module
    from . import prompts

    core = types.ModuleType("graphbook.core")
    core.__dict__.update(steps=steps, resources=resources, utils=utils, decorators=decorators, note=note, prompts=prompts, serialization=graph)
    modules = {
        "graphbook": authoring,
        "graphbook.core": core,
        "graphbook.steps": steps,
        "graphbook.core.steps": steps,
        "graphbook.resources": resources,
        "graphbook.core.resources": resources,
        "graphbook.utils": utils,
        "graphbook.core.utils": utils,
        "graphbook.decorators": decorators,
        "graphbook.core.decorators": decorators,
        "graphbook.note": note,
        "graphbook.core.note": note,
        "graphbook.prompts": prompts,
        "graphbook.core.prompts": prompts,
        "graphbook.logging": log_module,
        "graphbook.core.serialization": graph,
    }
    for name, module in modules.items():
        sys.modules.setdefault(name, module)
    for name, module in modules.items():  # attribute access after import: graphbook.core.steps.Step
        parent, _, child = name.rpartition(".")
        if parent and not hasattr(modules[parent], child):
            setattr(modules[parent], child, module)
    return True
