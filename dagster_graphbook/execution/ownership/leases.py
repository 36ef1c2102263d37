"""GPU leases: which GPUs a shard's process may use, so concurrent shards on one machine never
share a GPU unless ``runtime.shards_per_gpu`` allows it (docs/sharding.md, "Several GPUs on one
machine").

- A lease is one OS file lock per GPU slot (``fcntl.flock`` on ``<lease dir>/gpu-<id>.<slot>``),
  so the kernel releases it when its process ends however it ends (``kill -9`` included): no
  lease outlives its holder, and there is no lease server to run.
- The lease sets ``CUDA_VISIBLE_DEVICES`` to the leased ids before CUDA starts in the process:
  once CUDA has started (libcuda loaded, e.g. ``torch.cuda.is_available()`` at import), the
  process's GPUs are fixed, and a lease could not move it.
- The GPUs: ``DAGSTER_GRAPHBOOK_GPU_IDS`` when set (a pool given by hand), else, when NVML counts
  GPUs, the ``CUDA_VISIBLE_DEVICES`` this process was started with (its share of the machine: a
  pod, a Slurm job) or all of them. NVML does not start CUDA. No GPU: no lease, no wait (CPU).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ...errors import Label
from ...plan.settings import BatchRuntime
from ..errors import StepFailure

GPU_IDS_ENV = "DAGSTER_GRAPHBOOK_GPU_IDS"  # the GPU pool by hand ("": none), instead of NVML's
LEASE_DIR_ENV = "DAGSTER_GRAPHBOOK_GPU_LEASE_DIR"  # where the lock files are (default: per user)
VISIBLE = "CUDA_VISIBLE_DEVICES"
POLL_S = 0.1  # between tries while every GPU is leased
_LIBCUDA = re.compile(r"/libcuda\.so")

_held: Dict[int, str] = {}  # lock file descriptors of this process's leases -> GPU id
_pinned: Optional[Tuple[str, ...]] = None  # the GPUs CUDA started on here, under a lease


@dataclass
class Lease:
    """What a shard was given: GPU ids (empty: no lease, ``reason`` says why) and the wait."""

    ids: Tuple[str, ...] = ()
    waited_s: float = 0.0
    reason: str = ""
    fds: List[int] = field(default_factory=list, repr=False)

    @property
    def stats(self) -> Dict[str, Any]:
        """What the shard's stats record (nothing without a lease: a CPU run is unchanged)."""
        if not self.ids:
            return {}
        return {"gpus_leased": ",".join(self.ids), "gpu_wait_s": round(self.waited_s, 3)}


def nvml_gpu_count() -> int:
    """GPUs NVML counts on this machine (0 without a driver), without starting CUDA."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    if nvml.nvmlInit_v2() != 0:
        return 0
    try:
        count = ctypes.c_uint(0)
        return count.value if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else 0
    finally:
        nvml.nvmlShutdown()


def _ids(text: str) -> Tuple[str, ...]:
    """Ids of a ``CUDA_VISIBLE_DEVICES``-style list; CUDA stops at the first invalid one (-1)."""
    ids: List[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part or part.startswith("-"):
            break
        ids.append(part)
    return tuple(ids)


def gpu_pool() -> Tuple[str, ...]:
    """The GPU ids shards on this machine lease from (the module docstring says which)."""
    given = os.environ.get(GPU_IDS_ENV)
    if given is not None:
        return _ids(given)
    count = nvml_gpu_count()
    if count <= 0:
        return ()
    visible = os.environ.get(VISIBLE)
    return _ids(visible) if visible is not None else tuple(str(i) for i in range(count))


def lease_dir() -> Path:
    """The folder of the lock files: one per machine and user, unless given."""
    given = os.environ.get(LEASE_DIR_ENV)
    folder = Path(given) if given else Path(tempfile.gettempdir()) / _default_dir_name()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def _default_dir_name() -> str:
    return f"dagster-graphbook-gpu-leases-{os.getuid()}"


_CUDA_ERROR_NOT_INITIALIZED = 3  # what the driver API answers before cuInit


def cuda_started() -> bool:
    """Whether CUDA has started in this process: the driver's ``cuInit`` ran (a bare
    ``torch.cuda.is_available()`` runs it too), after which its GPUs are fixed. The driver
    library being loaded is not enough: some torch builds load it at ``import torch``, and
    ``CUDA_VISIBLE_DEVICES`` is read only by ``cuInit``. Asking the loaded driver for its device
    count answers "not initialized" without initializing it."""
    try:
        with open("/proc/self/maps") as maps:
            loaded = any(_LIBCUDA.search(line) for line in maps)
    except OSError:  # no /proc: torch's own flag, which misses a bare cudaGetDeviceCount
        torch = sys.modules.get("torch")
        return bool(torch is not None and torch.cuda.is_initialized())
    if not loaded:
        return False
    try:
        driver = ctypes.CDLL("libcuda.so.1")  # the loaded library: no second copy, no init
    except OSError:  # loaded under another name: assume started, as before
        return True
    count = ctypes.c_int(0)
    return driver.cuDeviceGetCount(ctypes.byref(count)) != _CUDA_ERROR_NOT_INITIALIZED


def gpus_wanted(device: str, gpus: Optional[int]) -> int:
    """GPUs a shard leases: none on the CPU (``device: cpu``, ``gpus: 0``), else the step's
    ``gpus=`` (default 1)."""
    if (device or "auto").strip().lower() == "cpu":
        return 0
    return 1 if gpus is None else gpus


def _close_in_child() -> None:
    """A forked child (a loader worker) drops its copies of the lease locks: only the holder's
    own descriptors keep a lease, so a lingering worker never outlives a killed shard's lease."""
    for fd in list(_held):
        os.close(fd)
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _try_take(pool: Sequence[str], count: int, per_gpu: int, folder: Path, owner: str) -> Any:
    """``count`` distinct GPUs, each with a free slot, as ``(ids, fds)``; None when too few are
    free (nothing kept). Slot 0 of every GPU before slot 1 of any: spread before sharing."""
    taken: Dict[str, int] = {}
    for slot in range(per_gpu):
        for gpu in pool:
            if gpu in taken:
                continue
            try:
                fd = os.open(_lock_path(folder, gpu, slot), os.O_RDWR | os.O_CREAT, 0o600)
            except OSError:  # a read-only or full folder: nothing kept, the caller says so
                _release(list(taken.values()))
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except OSError:
                os.close(fd)
                _release(list(taken.values()))
                raise
            taken[gpu] = fd
            with suppress(OSError):  # who holds it, for people waiting (a full disk: untold)
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()}: {owner}".encode())
            if len(taken) == count:
                _held.update({fd: gpu for gpu, fd in taken.items()})
                return tuple(taken), list(taken.values())
    _release(list(taken.values()))
    return None


def _release(fds: Sequence[int]) -> None:
    for fd in fds:
        _held.pop(fd, None)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _lock_path(folder: Path, gpu: str, slot: int) -> Path:
    """The lock file of one slot of one GPU (an id may be a UUID or a MIG path: made safe)."""
    return folder / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.{slot}"


def holders(pool: Sequence[str], per_gpu: int, folder: Path) -> str:
    """Who holds the pool's GPUs now, as the lock files say (for the waiting message)."""
    found = []
    for gpu in pool:
        for slot in range(per_gpu):
            path = _lock_path(folder, gpu, slot)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # free: a past holder's text
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                held_by = path.read_text().strip() or "a starting process"
                found.append(f"GPU {gpu} by {held_by}")
            finally:
                os.close(fd)
    return "; ".join(found) or "none (they were just released)"


def _wait(
    pool: Sequence[str],
    count: int,
    per_gpu: int,
    wait_s: Optional[float],
    progress_s: float,
    label: Label,
    owner: str,
    log: Callable[[str], None],
) -> Lease:
    """Take ``count`` GPUs of ``pool``, waiting while they are leased; past ``wait_s`` fail."""
    folder = lease_dir()
    start = last = time.monotonic()
    while True:
        got = _try_take(pool, count, per_gpu, folder, owner)
        now = time.monotonic()
        if got is not None:
            return Lease(got[0], now - start, fds=got[1])
        timed_out = wait_s is not None and now - start >= wait_s
        if timed_out or now - last >= progress_s:
            shared = f", {per_gpu} shards per GPU" if per_gpu > 1 else ""
            leased = holders(pool, per_gpu, folder)
            what = f"{count} of GPUs {','.join(pool)}{shared} (leased: {leased})"
            if timed_out:
                raise StepFailure(
                    label,
                    f"no GPU free after {now - start:.0f} s (runtime.gpu_wait_s) for {what}: "
                    "run fewer shards at once (runtime.shards, the 'gpu' pool's limit), raise "
                    "runtime.gpu_wait_s, or let shards share a GPU (runtime.shards_per_gpu)",
                )
            log(f"{label}: waiting {now - start:.0f} s for {what}")
            last = now
        time.sleep(POLL_S)


@contextmanager
def gpu_lease(
    count: int,
    *,
    label: Label,
    owner: str,
    log: Callable[[str], None],
    per_gpu: int = 1,
    wait_s: Optional[float] = None,
    progress_s: float = 5.0,
    pool: Optional[Sequence[str]] = None,
    warn: Optional[Callable[[str], None]] = None,
) -> Iterator[Lease]:
    """Lease ``count`` GPUs for the block: set ``CUDA_VISIBLE_DEVICES`` to them, release the
    locks at its end (the kernel does, if the process dies). ``pool`` defaults to ``gpu_pool()``.

    No lease (``Lease.reason`` says why): ``count`` 0, no GPU, CUDA already started in this
    process without one, or a lease folder that cannot be written (``warn`` says so). Where
    CUDA started under an earlier lease here (the in-process executor runs the shards one after
    another in one process), the same GPUs are leased again."""
    global _pinned
    pool = tuple(gpu_pool() if pool is None else pool)
    reason = _no_lease_reason(count, pool)
    started = not reason and cuda_started()
    if started and (_pinned is None or len(_pinned) != count):
        reason = (
            "CUDA started in this process before the shard (at import, or in an earlier step "
            "of an in-process run), so its GPUs are fixed: the shard uses them, unleased"
        )
    if reason:
        log(f"{label}: no GPU lease: {reason}")
        yield Lease(reason=reason)
        return
    if started and _pinned is not None:
        pool = _pinned  # this process's GPUs: lease them again, never others
    if count > len(pool):
        raise StepFailure(
            label,
            f"asks for {count} GPUs per shard (gpus=), and this machine leases {len(pool)} "
            f"({','.join(pool)}): ask for at most {len(pool)}",
            allow_retries=False,
        )
    try:
        lease = _wait(pool, count, per_gpu, wait_s, progress_s, label, owner, log)
    except OSError as exc:  # the lease folder cannot be written: run, saying what is lost
        reason = (
            f"the GPU lease folder cannot be written ({exc.strerror}: {exc.filename}): the "
            "shard runs unleased, so it may share a GPU with another shard; make the folder "
            f"writable (or set {LEASE_DIR_ENV})"
        )
        (warn or log)(f"{label}: no GPU lease: {reason}")
        yield Lease(reason=reason)
        return
    log(
        f"{label}: leased GPU {','.join(lease.ids)} (CUDA_VISIBLE_DEVICES={','.join(lease.ids)}) "
        f"after waiting {lease.waited_s:.1f} s"
    )
    before = os.environ.get(VISIBLE)
    os.environ[VISIBLE] = ",".join(lease.ids)
    try:
        yield lease
    finally:
        if cuda_started():  # the process runs on these GPUs for good: the variable says so
            _pinned = lease.ids
        elif before is None:
            os.environ.pop(VISIBLE, None)
        else:
            os.environ[VISIBLE] = before
        _release(lease.fds)


def _no_lease_reason(count: int, pool: Sequence[str]) -> str:
    if count <= 0:
        return "the shard runs on the CPU (device cpu or gpus 0)"
    if not pool:
        return "no GPU on this machine: the shard runs on the CPU"
    return ""


def check_device(device: str, lease: Lease, label: Label) -> None:
    """``cuda:N`` under a lease counts the leased GPUs only: refuse one past them, saying so."""
    found = re.fullmatch(r"cuda:(\d+)", (device or "").strip().lower())
    if lease.ids and found and int(found.group(1)) >= len(lease.ids):
        raise StepFailure(
            label,
            f"device {device!r}: this shard leased {len(lease.ids)} GPU(s) (physical "
            f"{','.join(lease.ids)}), which it sees as cuda:0..cuda:{len(lease.ids) - 1}: use "
            "device auto or cuda, or ask for more GPUs per shard (gpus=)",
            allow_retries=False,
        )


@contextmanager
def shard_lease(
    runtime: BatchRuntime,
    gpus: Optional[int],
    *,
    label: Label,
    owner: str,
    log: Any,
    warn: Optional[Callable[[str], None]] = None,
) -> Iterator[Lease]:
    """A shard's lease by its step's settings: ``gpus=`` GPUs (default 1, none on the CPU),
    ``runtime.shards_per_gpu``, ``gpu_wait_s``, progress lines every ``progress_interval_s``."""
    with gpu_lease(
        gpus_wanted(runtime.device, gpus),
        label=label,
        owner=owner,
        log=log,
        per_gpu=runtime.shards_per_gpu,
        wait_s=runtime.gpu_wait_s,
        progress_s=runtime.progress_interval_s,
        warn=warn,
    ) as lease:
        check_device(runtime.device, lease, label)
        yield lease
