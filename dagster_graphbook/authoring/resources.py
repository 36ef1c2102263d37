"""Graphbook's resource classes (``graphbook.resources``): a step receives ``value()``."""

from __future__ import annotations

from typing import Any, Dict

from .log import LogType, log

__all__ = ["Resource", "NumberResource", "FunctionResource", "ListResource", "DictResource"]


class Resource:
    """A shared value (a path, a loaded model, ...) bound to step parameters."""

    Parameters: Dict[str, dict] = {"val": {"type": "string", "description": "The value"}}
    Category = "Util"

    def __init__(self, val: Any = ""):
        self.val = val

    def log(self, message: Any, type: LogType = "info") -> None:
        log(message, type)

    def value(self) -> Any:
        return self.val


class NumberResource(Resource):
    Parameters = {"val": {"type": "number", "description": "The number"}}

    def value(self) -> float:
        return float(self.val)


class FunctionResource(Resource):
    """Holds Python source; consumers (``Split``, ``function`` params) compile it."""

    Parameters = {"val": {"type": "function", "description": "Python source of one function"}}

    def value(self) -> str:
        return self.val


class ListResource(Resource):
    Parameters = {"val": {"type": "list[string]", "description": "The list"}}

    def value(self) -> list:
        return list(self.val)


class DictResource(Resource):
    Parameters = {"val": {"type": "dict", "description": "The dict"}}

    def value(self) -> dict:
        return dict(self.val)


# The names Graphbook's editor saves for the built-in resources.
UI_NAMES = {
    "Text": Resource,
    "Number": NumberResource,
    "Function": FunctionResource,
    "List": ListResource,
    "Dict": DictResource,
}
