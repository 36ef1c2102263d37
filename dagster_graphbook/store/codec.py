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
from typing import Any, Set

from .tensors import map_tensors

PROTOCOL = pickle.HIGHEST_PROTOCOL
# a note's entry listing the positions of its items lost under ``on_item_error: skip`` (set by
# the batch driver, counted by the notes IO manager)
LOST_ITEMS_KEY = "graphbook_lost_items"
_MAX_DEPTH = 8  # containers nested deeper are not looked into (a note may be deep, or cyclic)


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


def _on_device(obj: Any) -> bool:
    """A tensor with data on a GPU (or another device than the CPU; ``meta`` holds no data and
    pickles as it is). A non-leaf tensor that requires grad is left to pickle, which refuses it
    on every device alike."""
    torch = _torch()
    return (
        torch is not None
        and isinstance(obj, torch.Tensor)
        and obj.device.type not in ("cpu", "meta")
        and (obj.is_leaf or not obj.requires_grad)
    )


def _cpu_copy(obj: Any) -> Any:
    """``obj``'s CPU copy, of its own type (a ``Parameter`` stays one) and ``requires_grad``."""
    torch = _torch()
    copy = obj.detach().cpu()
    if isinstance(obj, torch.nn.Parameter):
        return torch.nn.Parameter(copy, requires_grad=obj.requires_grad)
    return copy.requires_grad_(obj.requires_grad)


class _NotesPickler(pickle.Pickler):
    """Pickler that stores oversized tensor views as compact copies, and GPU tensors as CPU ones:
    stored notes open on any machine (a CPU-only one, a later step's process), and never hold
    a GPU's memory."""

    def __init__(self, file: Any, protocol: int = PROTOCOL):
        super().__init__(file, protocol=protocol)
        self.protocol = protocol

    def reducer_override(self, obj: Any) -> Any:
        if _on_device(obj):  # its CPU copy is compact already
            return _cpu_copy(obj).__reduce_ex__(self.protocol)
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
    """``obj`` with tensor views inside lists, tuples and dicts replaced by compact copies
    (containers keep their types; ``obj`` itself when it holds no such view).

    For objects sent to another process by a pickler we do not own (``concurrent.futures``,
    torch's shared-memory reducer, which would otherwise share the whole batch's storage).
    """
    return map_tensors(
        lambda t: t.clone() if is_oversized_view(t) else t, obj, max_depth=_MAX_DEPTH
    )


def tensor_bytes(obj: Any, limit: int = 0) -> int:
    """Bytes of tensor and numpy data reachable through dicts, lists and tuples of ``obj`` (each
    array counted once).

    Stops counting once ``limit`` (when > 0) is passed, so a warning check stays cheap.
    """
    torch, numpy = _torch(), sys.modules.get("numpy")
    leaf = tuple(
        t
        for t in (getattr(torch, "Tensor", None), getattr(numpy, "ndarray", None))
        if t is not None
    )
    seen: Set[int] = set()
    total = 0

    def count(array: Any) -> Any:
        nonlocal total
        if id(array) not in seen:
            seen.add(id(array))
            total += (
                int(array.nbytes)
                if numpy is not None and isinstance(array, numpy.ndarray)
                else array.numel() * array.element_size()
            )
            if limit and total > limit:
                raise _Enough
        return array

    try:
        map_tensors(count, obj, leaf=leaf, max_depth=_MAX_DEPTH)
    except _Enough:
        pass
    return total


class _Enough(Exception):
    pass


__all__ = ["compact", "dump", "dumps", "is_oversized_view", "load", "loads", "tensor_bytes"]
