"""Pickling notes so that each tensor costs its own bytes.

A batch step hands ``on_item_batch`` one view per item of the stacked batch tensor; pickle (and
torch's own reducer) store a view's whole storage, so a note holding one image stored the whole
batch. ``dumps`` writes a view whose storage is larger than its data as a compact copy (shared
views stay shared: pickle's memo sees the original object). numpy already pickles a view's own
bytes. ``compact`` does the same for objects handed to another process (dump_fn arguments).
"""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any, Dict, List

PROTOCOL = pickle.HIGHEST_PROTOCOL
# a note's entry listing the positions of its items lost under ``on_item_error: skip`` (set by
# the batch driver, counted by the notes IO manager)
LOST_ITEMS_KEY = "graphbook_lost_items"
_CONTAINERS = (list, tuple, dict)


def _torch() -> Any:
    """torch if the process already imported it (notes cannot hold tensors otherwise)."""
    return sys.modules.get("torch")


def is_oversized_view(obj: Any) -> bool:
    """A CPU tensor whose storage holds more bytes than the tensor itself (a view of a batch)."""
    torch = _torch()
    if torch is None or not isinstance(obj, torch.Tensor) or obj.device.type != "cpu":
        return False
    if obj.layout != torch.strided or obj.is_quantized:
        return False
    own = obj.numel() * obj.element_size()
    return obj.untyped_storage().nbytes() > own


class _NotesPickler(pickle.Pickler):
    """Pickler that stores oversized tensor views as compact copies."""

    def __init__(self, file: Any, protocol: int = PROTOCOL):
        super().__init__(file, protocol=protocol)
        self.protocol = protocol

    def reducer_override(self, obj: Any) -> Any:
        if is_oversized_view(obj):
            # a copy with storage of its own bytes; same dtype, shape and requires_grad
            copy = obj.detach().clone().requires_grad_(obj.requires_grad)
            return copy.__reduce_ex__(self.protocol)
        return NotImplemented


def dumps(obj: Any, protocol: int = PROTOCOL) -> bytes:
    """``pickle.dumps`` where every tensor costs its own bytes."""
    buffer = io.BytesIO()
    _NotesPickler(buffer, protocol=protocol).dump(obj)
    return buffer.getvalue()


def dump(obj: Any, file: Any, protocol: int = PROTOCOL) -> None:
    """``pickle.dump`` counterpart of :func:`dumps`."""
    _NotesPickler(file, protocol=protocol).dump(obj)


loads = pickle.loads
load = pickle.load


def compact(obj: Any) -> Any:
    """``obj`` with tensor views inside lists, tuples and dicts replaced by compact copies.

    For objects sent to another process by a pickler we do not own (``concurrent.futures``,
    torch's shared-memory reducer, which would otherwise share the whole batch's storage).
    """
    if is_oversized_view(obj):
        return obj.clone()
    if isinstance(obj, _CONTAINERS) and not _has_view(obj):
        return obj
    if isinstance(obj, list):
        return [compact(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(compact(v) for v in obj)
    if isinstance(obj, tuple):  # namedtuple
        return type(obj)(*(compact(v) for v in obj))
    if type(obj) is dict:
        return {k: compact(v) for k, v in obj.items()}
    return obj


def _has_view(obj: Any, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if is_oversized_view(obj):
        return True
    if isinstance(obj, dict):
        return any(_has_view(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_view(v, depth + 1) for v in obj)
    return False


def tensor_bytes(obj: Any, limit: int = 0, _seen: Any = None, _depth: int = 0) -> int:
    """Bytes of tensor and numpy data reachable through dicts, lists and tuples of ``obj``.

    Stops counting once ``limit`` (when > 0) is passed, so a warning check stays cheap.
    """
    seen: Dict[int, bool] = _seen if _seen is not None else {}
    if id(obj) in seen or _depth > 8:
        return 0
    seen[id(obj)] = True
    torch = _torch()
    if torch is not None and isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        return int(obj.nbytes)
    values: List[Any]
    if isinstance(obj, dict):
        values = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        values = list(obj)
    else:
        return 0
    total = 0
    for value in values:
        total += tensor_bytes(value, limit, seen, _depth + 1)
        if limit and total > limit:
            break
    return total


__all__ = ["compact", "dump", "dumps", "is_oversized_view", "load", "loads", "tensor_bytes"]
