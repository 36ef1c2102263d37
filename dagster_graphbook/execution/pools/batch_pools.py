"""The loader and dump pools of one batch step run, and who keeps them.

A step run in one go makes its pools and closes them at its end. A streamed batch step runs once
per chunk of its notes (``streaming.queue_items``); its driver keeps one ``BatchPools`` from the
first chunk to the step's end, so worker processes are forked once per step, not per chunk:
forking two loader workers from a step process that holds torch costs about 60 ms of CPU (9,200
page faults), and with the default chunks of 64 items the stream's process pool ran at 0.35x
the speed of the same step run in one go (``benchmarks/bench_loader.py --only chunks``).

What a batch run may call on the pools it is handed is declared here: ``Loader`` (a process or
thread loader, or the raw batches of a step without ``load_fn``) and ``DumpPool``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Protocol, Sequence

from ...plan.settings import BatchRuntime
from .priority import AutoPriority

if TYPE_CHECKING:  # the pools themselves import torch; they are made on first use
    from .dump_pool import DumpDone, ExecutorDumpPool
    from .loader import LoadedBatch, ProcessLoader


class Loader(Protocol):
    """A run's batches, in input order: ``ProcessLoader``, ``ThreadLoader`` or ``SyncBatches``."""

    def __iter__(self) -> Iterator[LoadedBatch]:
        """The batches; a dead worker process raises ``WorkerDied``."""
        ...

    def in_flight(self) -> Optional[int]:
        """Batches asked for and not yet handed out (None: not known), for progress lines."""
        ...

    def close(self) -> None:
        """Stop its workers or threads; what they still load is not needed."""
        ...


class DumpPool(Protocol):
    """Where a run's ``dump_fn`` calls go (``ExecutorDumpPool``); each call is keyed by its item."""

    def submit(self, key: Any, args: Sequence[Any]) -> List[DumpDone]:
        """Send one call (blocks while too many are in flight); the calls done meanwhile."""
        ...

    def poll(self, block: bool = False) -> List[DumpDone]:
        """The calls done since the last look."""
        ...

    def drain(self) -> List[DumpDone]:
        """Wait for every call sent; those done, as they finish."""
        ...

    def in_flight(self) -> int:
        """Calls sent and not done, for progress lines."""
        ...

    def pending_keys(self) -> List[Any]:
        """The keys (items) of the calls not done, for the stall watchdog."""
        ...

    def close(self, abort: bool = False) -> None:
        """Stop the workers; ``abort``: the step failed, pending calls are abandoned."""
        ...


class BatchPools:
    """The pools of one step: a process loader and a dump pool kept across chunks when ``keep``
    (thread loaders are made per chunk: starting threads costs nothing)."""

    def __init__(self, keep: bool = False):
        self.keep = keep
        self.process_loader: Optional[ProcessLoader] = None
        self.dumps: Optional[ExecutorDumpPool] = None
        self.priority: Optional[AutoPriority] = None

    def loader(self, run: Any, batch_size: int, device: str, has_load: bool) -> Loader:
        """The batches of the run's items: ``load_fn`` in worker processes or threads (or none)."""
        from .io_calls import share
        from .loader import ItemDataset, ProcessLoader, SyncBatches, ThreadLoader

        settings, step = run.settings, run.step
        if not has_load:
            return SyncBatches(run.items, batch_size)
        dataset = ItemDataset(
            run.items, step.load_fn, dict(getattr(step, "load_fn_params", None) or {})
        )
        dataset.call_timeout_s = settings.call_timeout_s
        # items on bucket URLs, this many at a time in each worker (io_calls.py): a share of
        # io_concurrency per worker process, all of it where the step process loads
        in_workers = settings.worker_type == "process" and settings.num_workers > 0
        dataset.io_threads = (
            share(settings.io_concurrency, settings.num_workers)
            if in_workers
            else settings.io_concurrency
        )
        if settings.worker_type != "process":
            return ThreadLoader(dataset, batch_size, settings, stack=device != "cpu")
        if self.process_loader is not None:
            if self.process_loader.aim(dataset):
                return self.process_loader
            # the chunk's items do not pickle: new workers, forked with them (as chunk 1's were)
            self.process_loader.close()
            self.process_loader = None
        loader = ProcessLoader(
            dataset,
            batch_size,
            settings,
            pin_memory=device.startswith("cuda"),
            node=run.node,
            label=run.label,
            keep=self.keep,
        )
        loader.warn = lambda m: run.emit("warning", f"{run.label}: {m}")  # e.g. /dev/shm too small
        self.process_loader = loader
        return loader

    def dump_pool(self, run: Any, has_dump: bool) -> Optional[DumpPool]:
        """The pool that runs ``dump_fn`` calls (None when the step has no ``dump_fn``)."""
        from .dump_pool import ExecutorDumpPool

        if not has_dump:
            return None
        if self.dumps is None:
            self.dumps = ExecutorDumpPool(
                run.step.dump_fn, run.settings, node=run.node, label=run.label
            )
        return self.dumps

    def auto_priority(
        self, settings: BatchRuntime, pools: list, say: Callable[[str], None]
    ) -> AutoPriority:
        """The step's worker priority: decided once per step, applied to pools made later."""
        if self.priority is None:
            self.priority = AutoPriority(settings.worker_nice, pools, say)
        else:
            self.priority.adopt(pools)
        return self.priority

    def end_run(self, loader: Loader, failed: bool) -> None:
        """After one run (a chunk): close what is not kept; everything when it failed."""
        if failed or not self.keep:
            self.close(abort=failed)
        if loader is not self.process_loader:
            loader.close()

    def close(self, abort: bool = False) -> None:
        """Stop the kept workers (the step ended, or failed: ``abort``)."""
        loader, dumps, self.process_loader, self.dumps = self.process_loader, self.dumps, None, None
        try:
            if loader is not None:
                loader.close()
        finally:
            if dumps is not None:
                dumps.close(abort=abort)
