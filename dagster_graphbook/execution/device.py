"""Device choice and moves for the batch path (CUDA when asked or available, else CPU)."""

from __future__ import annotations

from typing import Any

from ..store.tensors import map_tensors


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda[:N]`` must be available."""
    import torch

    device = (device or "auto").strip().lower()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {device!r} was requested but torch sees no CUDA device; use "
            "device 'auto' or 'cpu'"
        )
    torch.device(device)  # validates the spelling
    return device


def is_cuda_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is the device running out of memory: torch's ``OutOfMemoryError`` (the
    caching allocator's), or the ``AcceleratorError`` a CUDA library's own allocation raises
    (``CUDA error: out of memory``: cuBLAS, nvJPEG), which has no type of its own."""
    import sys

    torch = sys.modules.get("torch")  # no torch imported: it was not CUDA that failed
    if torch is None:
        return False
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    accelerator = getattr(torch, "AcceleratorError", None)
    return (
        accelerator is not None
        and isinstance(exc, accelerator)
        and "out of memory" in str(exc).lower()
    )


def memory_line(device: str) -> str:
    """``12.0 GiB allocated by torch, 0.4 of 79.2 GiB free on cuda:0``, or "" off CUDA."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return ""
    gib = 1024**3
    index = torch.device(device).index
    free, total = torch.cuda.mem_get_info(index)
    allocated = torch.cuda.memory_allocated(index)
    name = f"cuda:{index if index is not None else torch.cuda.current_device()}"
    return (
        f"{allocated / gib:.1f} GiB allocated by torch, {free / gib:.1f} of {total / gib:.1f} "
        f"GiB free on {name}"
    )


def move(obj: Any, device: str, non_blocking: bool = False) -> Any:
    """Move tensors (also inside lists, tuples and dicts, whose types are kept) to ``device``."""
    return map_tensors(lambda t: t.to(device, non_blocking=non_blocking), obj)


class _Found(Exception):
    pass


def contains_cuda(obj: Any) -> bool:
    """Whether a CUDA tensor is inside ``obj`` (through dicts, lists and tuples)."""

    def check(tensor: Any) -> Any:
        if tensor.is_cuda:
            raise _Found
        return tensor

    try:
        map_tensors(check, obj)
    except _Found:
        return True
    return False
