"""A batch as it leaves the loader pool: the items that loaded, in order, and those that failed.

Same-shape tensors of a batch travel as one stacked block (one copy to a GPU); other values stay
a list (Graphbook hands ``outputs`` as a list).
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

import torch


class LoadedBatch(NamedTuple):
    """One batch as it leaves the pool: same-shape tensors travel as one stacked block."""

    indices: List[int]  # item indices that loaded, in order
    values: Optional[List[Any]]  # loaded values, or None when stacked
    stacked: Optional[torch.Tensor]  # [len(indices), ...] when every value was a same-shape tensor
    errors: List[Tuple[int, str]]  # (item index, traceback) for items whose load_fn raised

    def outputs(self, device: str = "cpu") -> List[Any]:
        """The loaded values as a list, on ``device`` (a stacked block crosses to the GPU in one
        copy)."""
        if self.stacked is not None:
            block = self.stacked if device == "cpu" else self.stacked.to(device, non_blocking=True)
            return list(block.unbind(0))
        if device == "cpu":
            return list(self.values or [])
        from ...device import move

        return move(list(self.values or []), device, non_blocking=True)


def split_samples(
    samples: List[Tuple[int, Any, Optional[str]]],
) -> Tuple[List[int], List[Any], List[Tuple[int, str]]]:
    indices = [i for i, _, err in samples if err is None]
    values = [v for _, v, err in samples if err is None]
    errors = [(i, err) for i, _, err in samples if err is not None]
    return indices, values, errors


def stackable(values: List[Any]) -> bool:
    if len(values) < 2 or not all(isinstance(v, torch.Tensor) for v in values):
        return False
    first = values[0]
    return first.layout == torch.strided and all(
        v.shape == first.shape and v.dtype == first.dtype and v.device == first.device
        for v in values
    )


def collate(samples: List[Tuple[int, Any, Optional[str]]]) -> LoadedBatch:
    """Keep lists (Graphbook hands ``outputs`` as a list); stack same-shape tensors into one
    block."""
    indices, values, errors = split_samples(samples)
    if stackable(values):
        return LoadedBatch(indices, None, torch.stack(values), errors)
    return LoadedBatch(indices, values, None, errors)
