"""The dump pool through ``run_batch_step``: dump args that are lent loader views reach dump_fn
with their own item's data, with process and thread workers, when dumps lag behind."""

from __future__ import annotations

import os
import time

import pytest
import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from tests.execution.pools.pool_steps import batch_runtime


class Dumper(BatchStep):
    """Returns the lent tensors themselves as dump args; a slow dump_fn writes what it sees."""

    def __init__(self, folder):
        super().__init__(4, "items")
        self.folder = folder

    @staticmethod
    def load_fn(item):
        return torch.full((64,), float(item))

    def on_item_batch(self, outputs, items, notes):
        return [(os.path.join(self.folder, f"{i}.txt"), o) for i, o in zip(items, outputs)]

    @staticmethod
    def dump_fn(path, tensor):
        time.sleep(0.01)
        with open(path, "w") as f:
            f.write(",".join(str(int(v)) for v in set(tensor.tolist())))


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_lent_tensors_sent_as_dump_args_are_dumped_intact(tmp_path, worker_type):
    """Property: dump args that are the lent views reach dump_fn with their own item's data,
    even when dumps lag behind the loaders."""
    step = Dumper(str(tmp_path))
    run_batch_step(
        step,
        [{"items": list(range(40))}],
        batch_runtime(num_workers=2, prefetch=2, worker_type=worker_type, max_dumps_in_flight=8),
    )
    seen = {i: (tmp_path / f"{i}.txt").read_text() for i in range(40)}
    assert seen == {i: str(i) for i in range(40)}
