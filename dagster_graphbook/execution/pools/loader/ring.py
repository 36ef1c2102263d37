"""The shared-memory ring a loader worker process writes its stacked batches into.

Each worker keeps ``prefetch + 1`` reused blocks of ``/dev/shm`` (``SlabRing``); a batch crosses
to the step process as a ``SlabRef`` (worker, slot, batch number), or by value as a
``PipedBatch`` when ``/dev/shm`` is too small for the ring. Every block starts with a header:
the batch number stamped before the data, and a "retired" flag.
"""

from __future__ import annotations

import math
from typing import Any, List, NamedTuple, Optional, Tuple

import torch

from ..torch_internals import new_shared_storage
from ..workers import SHM_DIR, shm_free_bytes


class SlabRef(NamedTuple):
    """Where a worker wrote a stacked batch: slot ``slot`` of worker ``worker``'s ring."""

    worker: int
    slot: int
    seq: int  # the worker's batch number, stamped into the block's header before the data
    block: Optional[torch.Tensor]  # the shared block itself, sent only when the slot gets a new one
    shape: Tuple[int, ...]
    dtype: torch.dtype


# bytes before the data: the int64 batch number, the int64 "retired" flag, then padding that keeps
# the data aligned
_HEADER = 64


def _nbytes(shape: Tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def slot_view(block: torch.Tensor, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return block[_HEADER : _HEADER + _nbytes(shape, dtype)].view(dtype).view(shape)


def lent_view(block: torch.Tensor, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The batch in ``block``, on a storage of its own that holds the block through a numpy view.

    A plain view would share the block's storage: a step that pickles it to another process
    (a ``torch.multiprocessing`` queue) would send the ring's block itself, which the worker
    rewrites later. This storage is not shared memory, so torch's reducer moves it into new shared
    memory first (a copy), and the step's own tensors follow it off the block.
    """
    if math.prod(shape) == 0:  # frombuffer refuses a count of 0; nothing to lend
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(
        block.numpy(), dtype=dtype, offset=_HEADER, count=math.prod(shape)
    ).view(shape)


def stamp(block: torch.Tensor) -> torch.Tensor:
    return block[:8].view(torch.int64)


def retired(block: torch.Tensor) -> torch.Tensor:
    """Set by the step process when a lent batch outlived its step call: the worker must not write
    into the block again (it takes a new one for the slot)."""
    return block[8:16].view(torch.int64)


class SlabRing:
    """A DataLoader worker's ring of shared-memory blocks that stacked batches are written into.

    Why not torch's own tensor passing: it puts every batch into a new shared-memory file and
    passes its descriptor through multiprocessing's resource sharer (a connection per tensor).
    Measured on a 2-core machine for one 8x3x224x224 float batch: about 7 ms of worker CPU and
    2 ms in the step process, against 1 ms here (write into a block already mapped on both sides,
    send its slot number; the step is lent the slot on the CPU, or copies it into pinned memory
    for a GPU): as much as loading 5 of the 8 images. A block is sent once, when its slot first
    needs it (or needs a bigger one).

    Reuse is safe because DataLoader (map-style dataset, in order) hands tasks to its workers in
    turn and sends a new one only when it gives a batch to the step: a worker is at most
    ``prefetch`` tasks ahead of the batch being consumed, so with ``prefetch + 1`` slots a slot is
    rewritten only after the step gave it back (``ProcessLoader._take_back``: before it asks for
    the next batch). Each batch stamps its number into the block before its data, and the step
    checks the stamp when it gives the slot back (or after its copy), so a slot rewritten too
    early (a DataLoader that dispatched differently) fails loudly instead of mixing batches.
    """

    def __init__(self, slots: int, budget: Optional[int] = None):
        self.slots = slots
        self.budget = budget  # bytes of /dev/shm this worker may hold (None: no limit known)
        self.blocks: List[Optional[torch.Tensor]] = [None] * slots
        self.seq = 0

    def put(self, worker: int, values: List[torch.Tensor]) -> Any:
        """A ``SlabRef``, or a ``PipedBatch`` when the ring would not fit in ``/dev/shm``."""
        shape, dtype = (len(values), *values[0].shape), values[0].dtype
        size = _HEADER + _nbytes(shape, dtype)
        if self.budget is not None and size * self.slots > self.budget:
            why = (
                f"a ring of {self.slots} blocks of {size / 2**20:.1f} MiB does not fit in the "
                f"{self.budget / 2**20:.0f} MiB of /dev/shm left to each loader worker"
            )
            return PipedBatch.of(torch.stack(values), why)
        slot = self.seq % self.slots
        block, new = self.blocks[slot], None
        if block is None or block.numel() < size or int(retired(block)[0]):
            try:
                block = new = shared_block(size)
            except RuntimeError as exc:  # "unable to allocate shared memory ... No space left"
                why = f"/dev/shm is full ({str(exc).strip().splitlines()[0][:120]})"
                return PipedBatch.of(torch.stack(values), why)
            self.blocks[slot] = block
        self.seq += 1
        stamp(block)[0] = self.seq
        with torch.no_grad():  # a load_fn's requires_grad tensors: stack(out=) refuses autograd
            torch.stack(values, out=slot_view(block, shape, dtype))
        return SlabRef(worker, slot, self.seq, new, shape, dtype)


def shared_block(size: int) -> torch.Tensor:
    """``size`` bytes made in shared memory at once (``share_memory_()`` on a new tensor would
    fill private memory first and copy it over: twice the page faults), header zeroed."""
    block = torch.empty(0, dtype=torch.uint8).set_(new_shared_storage(size))
    block[:_HEADER].zero_()
    return block


class PipedBatch(NamedTuple):
    """A stacked batch sent by value through a pipe, when ``/dev/shm`` is too small for the ring
    (64 MiB by default in Docker and Kubernetes)."""

    array: Any  # its bytes as a numpy uint8 array: pickled by value, never through /dev/shm
    dtype: torch.dtype
    reason: str
    shape: Tuple[int, ...] = ()
    requires_grad: bool = False

    @classmethod
    def of(cls, block: torch.Tensor, reason: str) -> PipedBatch:
        """Any dtype numpy lacks (bfloat16, float8) travels as its bytes."""
        dense = block.detach().resolve_conj().resolve_neg().contiguous()
        data = dense.reshape(-1).view(torch.uint8).numpy()
        return cls(data, dense.dtype, reason, tuple(dense.shape), block.requires_grad)

    def tensor(self) -> torch.Tensor:
        out = torch.from_numpy(self.array).view(self.dtype).view(self.shape)
        return out.requires_grad_() if self.requires_grad else out


SHM_HELP = (
    "give the container more shared memory: `docker run --shm-size=2g`, "
    "`shm_size: 2gb` in docker compose, or on Kubernetes an "
    "`emptyDir: {medium: Memory, sizeLimit: 2Gi}` volume mounted at /dev/shm"
)


def shm_budget(num_workers: int, path: str = SHM_DIR) -> Optional[int]:
    """The bytes of ``/dev/shm`` each loader worker's ring may take: half the free space, shared."""
    free = shm_free_bytes(path)
    return None if free is None else free // 2 // max(1, num_workers)


def check_stamp(block: torch.Tensor, ref: SlabRef) -> None:
    """Fail loudly when a worker wrote into the slot while the step still read it."""
    if int(stamp(block)[0]) != ref.seq:
        raise RuntimeError(
            f"internal error: loader worker {ref.worker} rewrote ring slot {ref.slot} while "
            f"batch {ref.seq} was still in the step's hands (it holds batch "
            f"{int(stamp(block)[0])}); please report this with your torch version"
        )
