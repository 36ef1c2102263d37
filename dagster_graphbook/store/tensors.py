"""The tensors inside a note's values, wherever they sit in dicts, lists and tuples: one walk that
keeps every container's type, shared by the notes codec and the batch path's device moves."""

from __future__ import annotations

import copy
import sys
from typing import Any, Callable, Dict, List, Optional, Set, Tuple


def map_tensors(
    fn: Callable[[Any], Any],
    obj: Any,
    *,
    leaf: Optional[Tuple[type, ...]] = None,
    max_depth: Optional[int] = None,
) -> Any:
    """``obj`` with ``fn`` applied to each tensor inside it, through dicts, lists and tuples,
    keeping every container's type (torch's ``_utils/pin_memory.py`` rules): a namedtuple is
    rebuilt with ``type(obj)(*values)``, another tuple with ``type(obj)(values)``, a dict (an
    ``OrderedDict``, a ``Note``) and a list as a copy updated in place; a container that cannot
    be rebuilt so becomes a plain one.

    A container none of whose values ``fn`` replaced is returned itself, not a copy, so a walk
    whose ``fn`` returns its argument copies nothing. ``leaf``: the types ``fn`` is applied to
    (default ``torch.Tensor``); ``max_depth``: containers nested deeper are left as they are; a
    container inside itself is not entered again.
    """
    if leaf is None:
        torch = sys.modules.get("torch")  # no torch imported: there are no tensors
        leaf = (torch.Tensor,) if torch is not None else ()
    return _map(fn, obj, leaf, max_depth, 0, set())


def _map(
    fn: Callable[[Any], Any],
    obj: Any,
    leaf: Tuple[type, ...],
    max_depth: Optional[int],
    depth: int,
    path: Set[int],
) -> Any:
    if isinstance(obj, leaf):
        return fn(obj)
    if not isinstance(obj, (dict, list, tuple)):
        return obj
    if (max_depth is not None and depth >= max_depth) or id(obj) in path:
        return obj
    path.add(id(obj))
    try:
        if isinstance(obj, dict):
            items = {k: _map(fn, v, leaf, max_depth, depth + 1, path) for k, v in obj.items()}
            if all(items[k] is v for k, v in obj.items()):
                return obj
            return _rebuilt_dict(obj, items)
        values = [_map(fn, v, leaf, max_depth, depth + 1, path) for v in obj]
        if all(new is old for new, old in zip(values, obj)):
            return obj
        if isinstance(obj, tuple):
            return _rebuilt_tuple(obj, values)
        return _rebuilt_list(obj, values)
    finally:
        path.discard(id(obj))


def _rebuilt_dict(obj: dict, items: Dict[Any, Any]) -> dict:
    try:
        clone = copy.copy(obj)  # a dict subclass may carry more than its items
        clone.update(items)
        return clone
    except TypeError:
        return items


def _rebuilt_tuple(obj: tuple, values: List[Any]) -> tuple:
    try:
        if hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*values)
        return type(obj)(values)
    except TypeError:
        return tuple(values)


def _rebuilt_list(obj: list, values: List[Any]) -> list:
    try:
        clone = copy.copy(obj)
        clone[:] = values
        return clone
    except TypeError:
        return values
