"""`Note`: Graphbook's old note type, kept as a dict whose missing keys read as None."""

from __future__ import annotations

from typing import Any


class Note(dict):
    """A dict that returns None for missing keys.

    Graphbook code written for the Note era tests ``note["masks"] is None``; on a plain dict that
    raises KeyError, so notes built with ``Note(...)`` keep the old behaviour.
    """

    def __init__(self, items: dict | None = None, **kwargs: Any):
        super().__init__(items or {}, **kwargs)

    def __missing__(self, key: Any) -> None:
        return None

    def __repr__(self) -> str:
        return f"Note({dict.__repr__(self)})"
