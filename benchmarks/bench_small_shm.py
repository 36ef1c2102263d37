"""The /dev/shm fallback: a process-pool batch step of image-sized tensors with the ring of
shared-memory blocks (enough /dev/shm) against batches sent through the worker pipes (what a
64 MiB container /dev/shm gets). Prints a table; run by hand:

    python benchmarks/bench_small_shm.py [--items 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.execution.pools.loader import process as loader_pool  # sizes the ring
from dagster_graphbook.execution.pools.workers import SHM_DIR
from dagster_graphbook.plan.settings import BatchRuntime


class Images(BatchStep):
    def __init__(self) -> None:
        super().__init__(batch_size=16, item_key="items")

    @staticmethod
    def load_fn(item: int) -> torch.Tensor:
        return torch.full((3, 224, 224), float(item))  # 588 KiB, 9.2 MiB per batch

    def on_item_batch(self, tensors, items, notes):  # type: ignore[no-untyped-def]
        return None


def _run(items: int, piped: bool) -> float:
    real = loader_pool.shm_budget
    if piped:
        loader_pool.shm_budget = lambda num_workers, path=SHM_DIR: 1  # nothing fits
    try:
        notes = [{"items": list(range(n, min(n + 64, items)))} for n in range(0, items, 64)]
        settings = BatchRuntime(num_workers=2, worker_type="process", device="cpu")
        start = time.perf_counter()
        run_batch_step(Images(), notes, settings, pins=["out"])
        return items / (time.perf_counter() - start)
    finally:
        loader_pool.shm_budget = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rates = {"shared-memory ring": [], "pipe fallback": []}
    for _ in range(args.repeats):  # interleaved, so load on the machine hits both alike
        rates["shared-memory ring"].append(_run(args.items, piped=False))
        rates["pipe fallback"].append(_run(args.items, piped=True))
    ring = statistics.median(rates["shared-memory ring"])
    print(
        f"{args.items} items of 3x224x224 float32, batch 16, 2 worker processes, "
        f"median of {args.repeats}"
    )
    print("| transport | items/s | vs ring |")
    print("| --- | --- | --- |")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"| {name} | {rate:.0f} | {rate / ring:.2f}x |")


if __name__ == "__main__":
    main()
