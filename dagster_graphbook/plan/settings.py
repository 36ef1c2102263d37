"""Run settings, typed once: a step's, a batch step's and a stream's.

Each is one ``dg.Config`` class with one default and one description per field. The launchpad's
``runtime`` and ``streaming`` blocks are built from them (``to_fields_dict``), and the run-time
code takes them whole: the driver, the batch pools and the stream scheduler read attributes of
these objects, never a dict with defaults of its own.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Optional

import dagster as dg
from pydantic import Field

RUNTIME_KEY = "runtime"  # a step's settings, beside its parameters
STREAM_KEY = "streaming"  # a streaming op's own settings, beside its steps


class _Progress(dg.Config):
    progress_interval_s: float = Field(
        default=5.0, description="seconds between progress lines in the event log"
    )


class StepRuntime(dg.Config):
    """How a step runs: what a bad note does, retries, and the stall warning."""

    on_item_error: Literal["raise", "skip"] = Field(
        default="raise",
        description="raise: fail the op on a bad note or item; skip: record it (metadata "
        "'errors') and go on",
    )
    retries: int = Field(
        default=0,
        description="run the step again this many times when it fails (Dagster retry: the "
        "step restarts from its stored inputs)",
    )
    retry_delay_s: float = Field(default=0.0, description="seconds to wait before each retry")
    stall_warning_s: float = Field(
        default=60.0,
        description="log what the step is stuck in when it makes no progress for this long "
        "(0: never)",
    )


class BatchRuntime(StepRuntime, _Progress):
    """A batch step's settings: its loader and dump pools, its device and its integrity limits."""

    num_workers: int = Field(
        default=2, description="loader worker processes (or threads); 0 loads in the step process"
    )
    worker_type: Literal["process", "thread"] = Field(
        default="process",
        description="process: DataLoader workers (shared-memory tensors); thread: for load_fns "
        "that release the GIL",
    )
    prefetch: int = Field(default=2, description="batches loaded ahead per worker")
    start_method: Literal["fork", "spawn", "forkserver"] = Field(
        default="fork",
        description="how worker processes start; spawn/forkserver need load_fn/dump_fn in an "
        "installed package",
    )
    device: str = Field(
        default="auto", description="auto (CUDA when available), cpu, cuda or cuda:N"
    )
    dump_workers: Optional[int] = Field(
        default=None, description="dump_fn workers (default: num_workers)"
    )
    max_dumps_in_flight: int = Field(
        default=64, description="dump calls pending before on_item_batch waits"
    )
    worker_nice: int = Field(
        default=0,
        description="added to the nice value of loader and dump workers, so a CPU-bound model "
        "in the step keeps its core",
    )
    max_skipped_fraction: Optional[float] = Field(
        default=None,
        description="under skip: fail the step when a larger share of its items was lost to "
        "errors (the share of the whole step, streamed or not)",
    )
    call_timeout_s: Optional[float] = Field(
        default=None,
        description="a load_fn/dump_fn call running longer fails its item (worker processes "
        "and in-step loading)",
    )

    @property
    def dump_pool_size(self) -> int:
        """``dump_workers``, else one per loader worker (at least one)."""
        return self.dump_workers if self.dump_workers is not None else max(1, self.num_workers)


class StreamSettings(_Progress):
    """A streaming op's settings (its ``streaming`` block)."""

    queue_items: int = Field(
        default=64,
        description="items a batch step collects before it runs; the source waits meanwhile "
        "(bounds memory)",
    )


def runtime_class(kind: str) -> type:
    """The settings class of a step of ``kind`` (source | step | batch)."""
    return BatchRuntime if kind == "batch" else StepRuntime


def runtime_field(kind: str) -> dg.Field:
    """The launchpad's ``runtime`` block of a step (all fields default, so it is shown filled)."""
    return dg.Field(runtime_class(kind).to_fields_dict())


def stream_field() -> dg.Field:
    return dg.Field(StreamSettings.to_fields_dict())


def read_runtime(kind: str, config: Optional[Mapping[str, Any]]) -> StepRuntime:
    """The step's settings from its op config's ``runtime`` block (Dagster filled the defaults)."""
    return runtime_class(kind)(**dict(config or {}))
