"""The Graphbook-compatible authoring API (what ``import graphbook`` resolves to)."""

from . import decorators, prompts, resources, steps, utils
from .decorators import batch, event, output, param, prompt, resource, source, step
from .graph import Graph
from .log import log
from .note import Note

__dagster_graphbook_alias__ = True

__all__ = [
    "Graph",
    "Note",
    "batch",
    "decorators",
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
