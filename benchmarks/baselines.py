"""Per-item work, models and the non-project loaders the benchmark compares against.

Shared by bench_loader.py (project venv) and graphbook_baseline.py (graphbook venv), so every
configuration does exactly the same work: PIL open -> RGB -> 224x224 -> to_tensor, batches of 8,
and a model that runs in the consuming (main) process.
"""

from __future__ import annotations

import math
import resource
import signal
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Optional, Sequence

import torch
import torchvision.transforms.functional as TF
from PIL import Image
from torch.utils.data import DataLoader, Dataset

BATCH_SIZE = 8
NUM_WORKERS = 2
Model = Callable[[Any], Any]


def configure() -> None:
    """One torch thread per process: parallelism must come from the loader, and the ideal is 2x
    sequential."""
    torch.set_num_threads(1)


def load_item(path: str) -> torch.Tensor:
    """The per-item work every configuration runs (in a worker where it has one)."""
    with Image.open(path) as im:
        return TF.to_tensor(im.convert("RGB").resize((224, 224), Image.BILINEAR))


def as_batch(batch: Any) -> torch.Tensor:
    return batch if isinstance(batch, torch.Tensor) else torch.stack(list(batch))


def trivial_model(batch: Any) -> float:
    """The 'model' of the I/O-bound runs: stack (if the loader did not) and reduce."""
    return float(as_batch(batch).mean())


def no_model(batch: Any) -> None:
    """Load-only runs: the batch is received and dropped."""
    return None


class ConvModel(torch.nn.Module):
    """A small conv net, repeated `reps` times, so one batch's compute can be matched to its load
    time."""

    def __init__(self, reps: int = 1):
        super().__init__()
        self.reps = reps
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=4, padding=1),
            torch.nn.ReLU(),  # ~5 ms per batch of 8: fine steps
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(32, 10),
        ).eval()

    @torch.no_grad()
    def __call__(self, batch: Any) -> float:
        x = as_batch(batch)
        for _ in range(self.reps):
            y = self.net(x)
        return float(y.sum())


def _load_forward_pairs(
    paths: Sequence[str], samples: int, forward: Callable[[torch.Tensor], float]
) -> list[tuple[float, float]]:
    """(load seconds, forward seconds) of up to `samples` batches, each loaded then forwarded:
    this machine's speed drifts (shared host), and a pair sees the same conditions."""
    out = []
    for i in range(max(1, min(samples, len(paths) // BATCH_SIZE))):
        t0 = time.perf_counter()
        batch = torch.stack([load_item(p) for p in paths[i * BATCH_SIZE : (i + 1) * BATCH_SIZE]])
        out.append((time.perf_counter() - t0, forward(batch)))
    return out


def calibrated_conv_model(
    paths: Sequence[str], samples: int = 10
) -> tuple[ConvModel, float, float]:
    """ConvModel whose per-batch time is about one batch's sequential load time; returns (model,
    load_s, compute_s).

    Loads and forwards alternate batch by batch and the reps come from the median ratio of pairs:
    this machine's speed drifts (shared host), and a pair sees the same conditions.
    """
    model = ConvModel(1)

    def forward(batch: torch.Tensor) -> float:
        t0 = time.perf_counter()
        model(batch)
        return time.perf_counter() - t0

    def pairs() -> list[tuple[float, float]]:
        return _load_forward_pairs(paths, samples, forward)

    pairs()  # warm-up
    model.reps = max(1, round(statistics.median(load / fwd for load, fwd in pairs())))
    # one correction: a single rep carries the call's fixed cost, so reps from it fall short
    # (x5 = 6.7 ms against 11.8 ms of loading before this pass)
    model.reps = max(1, round(model.reps * statistics.median(ld / fw for ld, fw in pairs())))
    final = pairs()
    return model, statistics.median(p[0] for p in final), statistics.median(p[1] for p in final)


class CudaConvModel(torch.nn.Module):
    """ConvModel's GPU variant: 64-channel 3x3 convs at full 224x224 resolution, so each kernel
    runs long enough that the GPU, not the launches from the step's thread, sets the pace; the
    middle conv repeats `reps` times. Each call records a CUDA event pair around the model's
    work (busy_s() sums them) and the time of the first call since reset().

    sync_each_batch: read the result back every batch (float(y.sum())), as a step that logs a
    loss or converts outputs to numpy does; otherwise the output stays on the GPU and the step's
    thread goes on to the next batch while the GPU works."""

    def __init__(self, device: str = "cuda", reps: int = 1, sync_each_batch: bool = False):
        super().__init__()
        self.device, self.reps, self.sync_each_batch = device, reps, sync_each_batch
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU())
        self.block = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU())
        self.head = torch.nn.Sequential(
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)
        )
        self.to(device).eval()
        self.reset()

    def reset(self) -> None:
        self.events: list = []
        self.first_call: Optional[float] = None

    @torch.no_grad()
    def __call__(self, batch: Any) -> Any:
        if self.first_call is None:
            self.first_call = time.perf_counter()
        x = as_batch(batch)  # the batch op hands over CUDA tensors: this stacks on the GPU
        if not x.is_cuda:  # a DataLoader's (pinned) CPU batch
            x = x.to(self.device, non_blocking=True)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y = self.stem(x)
        for _ in range(self.reps):
            y = self.block(y)
        y = self.head(y)
        end.record()
        self.events.append((start, end))
        return float(y.sum()) if self.sync_each_batch else y

    def busy_s(self) -> float:
        """Seconds the GPU spent in the model's work since reset() (synchronizes first)."""
        torch.cuda.synchronize()
        return sum(start.elapsed_time(end) for start, end in self.events) / 1e3


class ResNetModel(torch.nn.Module):
    """A torchvision ResNet (random weights: nothing here downloads any) in eval mode,
    channels-last, under bf16 autocast: the kind of model a GPU batch step runs. Records a CUDA
    event pair around each call, as CudaConvModel does (busy_s, first_call)."""

    def __init__(self, arch: str = "resnet50", device: str = "cuda"):
        super().__init__()
        import torchvision

        self.arch, self.device = arch, device
        self.net = getattr(torchvision.models, arch)(weights=None)
        self.net.to(device, memory_format=torch.channels_last).eval()
        self.reset()

    reset = CudaConvModel.reset
    busy_s = CudaConvModel.busy_s

    @torch.inference_mode()
    def __call__(self, batch: Any) -> Any:
        if self.first_call is None:
            self.first_call = time.perf_counter()
        x = as_batch(batch)
        if not x.is_cuda:
            x = x.to(self.device, non_blocking=True)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = self.net(x.contiguous(memory_format=torch.channels_last))
        end.record()
        self.events.append((start, end))
        return y


def calibrated_cuda_model(
    paths: Sequence[str], device: str = "cuda", samples: int = 10
) -> tuple[CudaConvModel, float, float]:
    """CudaConvModel whose GPU time per batch is about one batch's sequential load time or a
    little more (reps rounded up): with 2 or more loader workers the model is the bottleneck.
    Returns (model, load_s, gpu_s), medians of load/forward pairs as in calibrated_conv_model."""
    model = CudaConvModel(device, reps=1)

    def forward(batch: torch.Tensor) -> float:
        x = batch.to(device)
        model.reset()
        model(x)
        return model.busy_s()

    def pairs() -> list[tuple[float, float]]:
        return _load_forward_pairs(paths, samples, forward)

    pairs()  # warm-up: CUDA context, cuDNN's choice of kernels
    model.reps = max(1, math.ceil(statistics.median(load / gpu for load, gpu in pairs())))
    final = pairs()
    short = statistics.median(load / gpu for load, gpu in final)
    if short > 1:  # the stem and head do not repeat: scale the repeated part up, once
        model.reps = math.ceil(model.reps * short)
        final = pairs()
    model.reset()
    return model, statistics.median(p[0] for p in final), statistics.median(p[1] for p in final)


# ---- harness -------------------------------------------------------------------------------


@contextmanager
def bounded(seconds: float):
    """Raise TimeoutError in the main thread after `seconds`, so a hung pool cannot hang the
    benchmark."""

    def _alarm(signum, frame):
        raise TimeoutError(f"run took longer than {seconds:.0f}s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def measure(run: Callable[[], None], repeats: int, timeout: float) -> list[float]:
    """One warm-up, then `repeats` timed runs (seconds each). Each run includes pool start and
    stop."""
    times = [_bounded_run(run, timeout)[0] for _ in range(repeats + 1)]
    return times[1:]


def measure_round_robin(
    runs: dict[str, Callable[[], None]], repeats: int, timeout: float, cpu: Optional[dict] = None
) -> dict[str, Any]:
    """Like measure() for several configurations, interleaved run by run, so background load on a
    shared machine hits all of them alike. Returns label -> list of seconds, or the exception that
    stopped it. With `cpu`, also fills label -> list of CPU seconds of each timed run (this process
    and its children)."""
    out: dict[str, Any] = {label: [] for label in runs}
    for i in range(repeats + 1):
        for label, run in runs.items():
            if isinstance(out[label], BaseException):
                continue
            try:
                elapsed, cpu_s = _bounded_run(run, timeout)
            except (
                Exception
            ) as e:  # a failed or timed-out configuration is reported; the others go on
                out[label] = e
                continue
            if i:
                out[label].append(elapsed)
                if cpu is not None:
                    cpu.setdefault(label, []).append(cpu_s)
    return out


def _cpu_s() -> float:
    """CPU seconds used so far by this process (all threads) and its waited-for children (pool
    workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _bounded_run(run: Callable[[], None], timeout: float) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    with bounded(timeout):
        c0, t0 = _cpu_s(), time.perf_counter()
        run()
        return time.perf_counter() - t0, _cpu_s() - c0


# ---- configurations a-d --------------------------------------------------------------------


def run_sequential(paths: Sequence[str], model: Model = trivial_model) -> None:
    """(a) One process, plain loop."""
    for i in range(0, len(paths), BATCH_SIZE):
        model([load_item(p) for p in paths[i : i + BATCH_SIZE]])


class PathDataset(Dataset):
    def __init__(self, paths: Sequence[str]):
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return load_item(self.paths[i])


def run_dataloader(
    paths: Sequence[str],
    stack: bool,
    model: Model = trivial_model,
    timeout: float = 120,
    num_workers: int = NUM_WORKERS,
    pin_memory: bool = False,
) -> None:
    """(b) collate_fn=list: what Graphbook-style on_item_batch(outputs=list) needs; (c) default
    collate stacks in the worker. `pin_memory` (CUDA only) pins each batch in the main process,
    as a GPU training loop would."""
    loader = DataLoader(
        PathDataset(paths),
        batch_size=BATCH_SIZE,
        num_workers=num_workers,
        collate_fn=None if stack else list,
        multiprocessing_context="fork" if num_workers else None,
        timeout=timeout if num_workers else 0,
        pin_memory=pin_memory,
    )
    for batch in loader:
        model(batch)


def run_threads(paths: Sequence[str], model: Model = trivial_model, timeout: float = 120) -> None:
    """(d) ThreadPoolExecutor.map with 2 threads: PIL releases the GIL in decode/resize, so this is
    the thread ideal."""
    pool = ThreadPoolExecutor(NUM_WORKERS)
    try:
        batch = []
        for tensor in pool.map(load_item, paths, timeout=timeout):
            batch.append(tensor)
            if len(batch) == BATCH_SIZE:
                model(batch)
                batch = []
        if batch:
            model(batch)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
