"""Device choice and moves for the batch path (CUDA when asked or available, else CPU)."""

from __future__ import annotations

from typing import Any


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


def move(obj: Any, device: str, non_blocking: bool = False) -> Any:
    """Move tensors (also inside lists, tuples and dicts) to ``device``."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, list):
        return [move(v, device, non_blocking) for v in obj]
    if isinstance(obj, tuple):
        return tuple(move(v, device, non_blocking) for v in obj)
    if isinstance(obj, dict):
        return {k: move(v, device, non_blocking) for k, v in obj.items()}
    return obj


def contains_cuda(obj: Any) -> bool:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.is_cuda
    if isinstance(obj, (list, tuple)):
        return any(contains_cuda(v) for v in obj)
    if isinstance(obj, dict):
        return any(contains_cuda(v) for v in obj.values())
    return False
