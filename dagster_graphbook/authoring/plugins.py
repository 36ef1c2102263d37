"""``graphbook.core.plugins``: what a Graphbook plugin package calls when it is imported.

A plugin's ``__init__`` does ``export("Name", Cls)`` and ``web("dist/bundle.js")``. Under Dagster
there is no web bundle to serve; exported steps and resources are recorded so the plugin imports
unchanged (its node classes are found like any custom node when its folder is scanned).
"""

from __future__ import annotations

import inspect
from typing import Dict, Tuple

from .resources import Resource
from .steps import Step

__all__ = ["Resource", "Step", "export", "setup_plugins", "web"]

exported_steps: Dict[str, Dict[str, type]] = {}
exported_resources: Dict[str, Dict[str, type]] = {}
exported_web: Dict[str, str] = {}


def _caller_module() -> str:
    frame = inspect.stack()[2].frame
    return frame.f_globals.get("__name__", "__main__")


def export(name: str, cls: type) -> None:
    """Record a plugin's step or resource class under ``name`` (anything else raises)."""
    module = _caller_module()
    if isinstance(cls, type) and issubclass(cls, Step):
        exported_steps.setdefault(module, {})[name] = cls
    elif isinstance(cls, type) and issubclass(cls, Resource):
        exported_resources.setdefault(module, {})[name] = cls
    else:
        raise ValueError("Only Step and Resource classes can be exported")


def web(location: str) -> None:
    """Record the plugin's web bundle (the Dagster UI does not load it)."""
    exported_web[_caller_module()] = location


def setup_plugins() -> Tuple[
    Dict[str, Dict[str, type]], Dict[str, Dict[str, type]], Dict[str, str]
]:
    return exported_steps, exported_resources, exported_web
