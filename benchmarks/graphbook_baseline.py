"""(e) Graphbook 0.13.3's own worker pool, driven the way its UI executor drives a BatchStep.

Runs in benchmarks/.venv-graphbook (graphbook pins pillow<11, so it cannot share the project venv)
and prints one JSON object. It also times the sequential loop in this venv, because the pillow
version differs from the project venv's and decode speed with it.

Driving, as `WebInstanceProcessor.run` does (graphbook/core/processing/web_processor.py):
  - one `Dataloader(num_workers)` per processor (its Manager server lives across runs);
  - per run: `dataloader.start([id(step)], [step.load_fn], [step.dump_fn])` (re-forks 2N workers),
    then one pass per upstream note: `step.in_q(note)` (-> `put_load`) and `step()` (one `get_load`
    poll, maybe a batch -> `on_item_batch`); once the source is drained, `step.all()` (flushing
    polls) while `step.is_active()`; finally `dataloader.stop()`.
The rest of the executor (graph state, image logging, output copies) is left out: this is the
pool's best case.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import PIL
import torch
from baselines import (
    BATCH_SIZE,
    NUM_WORKERS,
    configure,
    load_item,
    measure,
    run_sequential,
    trivial_model,
)
from imageset import make_image_set

from graphbook.core.dataloading import Dataloader
from graphbook.core.steps import BatchStep
from graphbook.core.utils import ExecutionContext


class LoadImages(BatchStep):
    """A class-based BatchStep (the `@batch` decorator is broken in 0.13.3)."""

    load_fn = staticmethod(load_item)

    def __init__(self):
        super().__init__(BATCH_SIZE, "path")
        self.id = "load_images"

    def on_item_batch(self, outputs, items, data):
        trivial_model(outputs)


def run_graphbook(dataloader: Dataloader, step: LoadImages, notes: list, deadline_s: float) -> None:
    released = []
    deadline = time.monotonic() + deadline_s

    def collect(out):
        for pin_notes in out.values():
            released.extend(pin_notes)

    dataloader.start([id(step)], [step.load_fn], [step.dump_fn])
    try:
        for note in notes:  # one upstream note per executor pass
            step.in_q(note)
            collect(step())
        while step.is_active():  # upstream drained: the executor calls the flushing all()
            if dataloader.is_failed() or time.monotonic() > deadline:
                raise RuntimeError(
                    "graphbook worker failed" if dataloader.is_failed() else "timeout"
                )
            collect(step.all())
    finally:
        dataloader.stop()
    if len(released) != len(notes):
        raise RuntimeError(f"released {len(released)} of {len(notes)} notes")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--items", type=int, default=800)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    configure()
    paths = make_image_set(args.root, args.items, args.size)

    seq = measure(lambda: run_sequential(paths), args.repeats, args.timeout)
    dataloader = Dataloader(NUM_WORKERS)
    ExecutionContext.update(dataloader=dataloader, node_id="load_images", node_name="LoadImages")
    step = LoadImages()
    try:
        pool = measure(
            lambda: run_graphbook(dataloader, step, [{"path": p} for p in paths], args.timeout),
            args.repeats,
            args.timeout + 30,
        )
    finally:
        dataloader.shutdown()
        dataloader.manager.shutdown()
    print(
        json.dumps(
            {
                "graphbook": "0.13.3",
                "pillow": PIL.__version__,
                "torch": torch.__version__,
                "items": len(paths),
                "pool_times": pool,
                "sequential_times": seq,
                "pool_items_per_s": len(paths) / statistics.median(pool),
                "sequential_items_per_s": len(paths) / statistics.median(seq),
            }
        )
    )


if __name__ == "__main__":
    main()
