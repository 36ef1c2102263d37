"""The Graphbook-compatible authoring API (what ``import graphbook`` resolves to)."""

import importlib
from typing import Any

from . import decorators, graphbook_finder, prompts, resources, steps, utils
from .decorators import batch, event, output, param, prompt, resource, source, step
from .graph import Graph
from .images import EncodedImage, encoded_image
from .log import log
from .note import Note

__dagster_graphbook_alias__ = True
# ``import graphbook.ray`` goes through the finder (what the startup hook installs, where it ran)
graphbook_finder.install()


def __getattr__(name: str) -> Any:
    """``graphbook.ray`` (``from graphbook import ray``) on first use: it imports Ray and
    dagster-ray, which ``import graphbook`` must not need (its ImportError names the extra)."""
    from .compat import LAZY_ALIASES

    target = LAZY_ALIASES.get(f"graphbook.{name}")
    if target is None:
        raise AttributeError(f"module 'graphbook' has no attribute {name!r}")
    return importlib.import_module(target)


__all__ = [
    "EncodedImage",
    "Graph",
    "Note",
    "batch",
    "decorators",
    "encoded_image",
    "event",
    "log",
    "output",
    "param",
    "prompt",
    "prompts",
    "resource",
    "resources",
    "source",
    "step",
    "steps",
    "utils",
]
