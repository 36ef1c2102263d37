"""Helpers Graphbook code imports from ``graphbook.utils``."""

from __future__ import annotations

import re
import types
from typing import Any, Callable

from .log import transform_json_log

__all__ = [
    "transform_function_string",
    "image",
    "is_batchable",
    "convert_dict_values_to_list",
    "transform_json_log",
]

_DEF = re.compile(r"^\s*def\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.MULTILINE)


def transform_function_string(func_str: str) -> Callable[..., Any]:
    """Compile a ``def f(...): ...`` source string and return the function it defines.

    This runs the code: function strings are trusted input (see the trust rule in
    docs/reliability.md).
    """
    if callable(func_str):
        return func_str
    if not isinstance(func_str, str):
        raise TypeError(
            "a function parameter must be Python source starting with 'def', got "
            f"{type(func_str).__name__}"
        )
    source = func_str.strip("\n")
    match = _DEF.search(source)
    if match is None or source.lstrip()[:3] != "def":
        raise ValueError(f"function source must start with 'def name(...):', got {source[:40]!r}")
    module = types.ModuleType("graphbook_function")
    exec(compile(source, "<function parameter>", "exec"), module.__dict__)
    return module.__dict__[match.group(1)]


def image(path_or_pil: Any) -> dict:
    """Graphbook's image convention: a dict the UI (here: asset metadata) shows as an image."""
    return {"type": "image", "value": path_or_pil}


def is_batchable(obj: Any) -> bool:
    """A list or a tensor is split into items; anything else is one item."""
    return isinstance(obj, list) or type(obj).__name__ == "Tensor"


def convert_dict_values_to_list(d: dict) -> None:
    """Wrap non-list values of a step output in a list, in place."""
    for key, value in d.items():
        if not isinstance(value, list):
            d[key] = [value]
