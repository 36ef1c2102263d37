"""The loader pool through ``run_batch_step``, with real worker processes: whatever a step keeps
of a lent ring slot keeps its own items; what load_fn may return (values ``num_workers=0`` takes
load with process workers too; values that cannot be pickled fail promptly naming the step, or
are skipped under skip); the ring leaves ``/dev/shm`` as it found it."""

from __future__ import annotations

import gc
import time

import pytest
import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.execution.pools.batch_pools import BatchPools
from tests.execution.pools.pool_steps import (
    KEPT,
    Keeper,
    batch_runtime,
    check_kept,
    run_or_unstick,
    shm_left,
    shm_names,
)

HOWS = [
    "views",
    "slices",
    "numpy",
    "late",
    "closure",
    "global",
    "stack",
    "notes",
    "memoryview",
    "dlpack",
]


@pytest.mark.parametrize("how", HOWS)
def test_kept_lent_tensors_never_see_another_batch(how):
    """Property: whatever a step keeps of a lent batch, across 1-4 workers and prefetch 1-3,
    still holds its own items after the run; /dev/shm is left as it was."""
    before = shm_names()
    for workers, prefetch in [(1, 1), (2, 2), (3, 3), (4, 1)]:
        KEPT.clear()
        step = Keeper(how)
        notes = [{"items": list(range(48))}]
        run_batch_step(step, notes, batch_runtime(num_workers=workers, prefetch=prefetch))
        pairs = step.kept + list(KEPT) + list(notes[0].get("kept", []))
        if how != "late":
            assert len(pairs) == 48, (workers, prefetch, len(pairs))
        check_kept(pairs)
    KEPT.clear()
    left = shm_left(before)
    assert not left, left


def test_kept_lent_tensors_with_failed_items_and_odd_shapes(tmp_path):
    """Property: batches with failing items (skipped) and batches that fall back to lists (odd
    shapes) mixed with lent ones keep their own data."""

    class Odd(Keeper):
        @staticmethod
        def load_fn(item, fail_every=0):
            if item % 7 == 3:
                raise ValueError(f"bad item {item}")
            if item % 11 == 5:
                return torch.full((2, 5), float(item))
            return torch.full((3, 5), float(item))

    for workers, prefetch in [(1, 1), (2, 2), (3, 3)]:
        step = Odd("views")
        step.on_item_error = "skip"
        notes = [{"items": list(range(60))}]
        run_batch_step(
            step,
            notes,
            batch_runtime(num_workers=workers, prefetch=prefetch, on_item_error="skip"),
        )
        assert len(step.kept) == 60 - len([i for i in range(60) if i % 7 == 3])
        check_kept(step.kept)


def test_lent_tensor_handed_to_another_process_keeps_its_data(tmp_path):
    """A step that hands its outputs to a process of its own (torch.multiprocessing queue: the
    receiver maps the same shared memory) and drops them: the receiver must still read its own
    item, not a batch the loader worker wrote into the slot afterwards."""
    import torch.multiprocessing as tmp

    ctx = tmp.get_context("fork")
    q, out = ctx.Queue(), ctx.Queue()

    def reader():
        got = []
        while True:
            msg = q.get()
            if msg is None:
                break
            i, t = msg
            time.sleep(0.05)  # reads after the loaders went on
            got.append((i, sorted(set(t.flatten().tolist()))))
        out.put(got)

    proc = ctx.Process(target=reader, daemon=True)
    proc.start()

    class Handoff(Keeper):
        def on_item_batch(self, outputs, items, notes):
            for i, o in zip(items, outputs):
                q.put((i, o))
            time.sleep(0.01)  # the queue's feeder thread has pickled them

    try:
        run_batch_step(Handoff("none"), [{"items": list(range(24))}], batch_runtime(prefetch=1))
        q.put(None)
        got = out.get(timeout=20)
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    bad = [(i, vals) for i, vals in got if vals != [float(i)]]
    assert not bad, f"the receiver saw other batches' data: {bad[:5]}"


def test_load_fn_returning_requires_grad_tensors_loads_with_process_workers():
    """load_fn returning tensors with requires_grad=True (a model-made augmentation) must load
    with process workers as it does with num_workers=0; the ring's torch.stack(out=...) refuses
    autograd tensors."""

    class Grad(BatchStep):
        def __init__(self):
            super().__init__(4, "items")
            self.got = []

        @staticmethod
        def load_fn(item):
            return torch.full((3,), float(item), requires_grad=True) * 1

        def on_item_batch(self, outputs, items, notes):
            self.got += [float(o[0]) for o in outputs]

    inline, pooled = Grad(), Grad()
    run_batch_step(inline, [{"items": list(range(8))}], batch_runtime(num_workers=0))
    assert inline.got == [float(i) for i in range(8)]
    run_batch_step(pooled, [{"items": list(range(8))}], batch_runtime(num_workers=2))
    assert pooled.got == inline.got


class Nothing(Keeper):
    def on_item_batch(self, outputs, items, notes):
        self.kept.append(float(outputs[0][0, 0]))


@pytest.mark.parametrize("dump", [False, True], ids=["no-dump", "dump"])
def test_a_step_that_keeps_nothing_stays_lent_through_the_driver(dump):
    """Property (the point of lending): through run_batch_step, a step that keeps nothing of its
    batches is lent every batch (no slot retired, no fall back to copies)."""

    class WithDump(Nothing):
        def on_item_batch(self, outputs, items, notes):
            super().on_item_batch(outputs, items, notes)
            return [(float(o[0, 0]),) for o in outputs]

        @staticmethod
        def dump_fn(x):
            pass

    pools = BatchPools(keep=True)
    step = WithDump("none") if dump else Nothing("none")
    try:
        run_batch_step(step, [{"items": list(range(40))}], batch_runtime(), pools=pools)
        loader = pools.process_loader
        assert loader.lend, "the driver kept a reference: every batch after the first is copied"
        assert len(loader.blocks) == 2 * 3  # workers x (prefetch + 1), none retired
    finally:
        pools.close()
    assert step.kept == [float(i) for i in range(0, 40, 4)]


class RaisesSometimes(Keeper):
    """Keeps the views of every batch, then raises for every third batch (after keeping them,
    and with them in the exception's frames) under on_item_error skip."""

    def on_item_batch(self, outputs, items, notes):
        self.kept += list(zip(items, outputs))
        if (items[0] // 4) % 3 == 1:
            self.errors = getattr(self, "errors", 0) + 1
            raise ValueError(f"model failed on batch {items[0] // 4}: {outputs[0][0, 0]}")


@pytest.mark.parametrize("workers,prefetch", [(1, 1), (2, 3)])
def test_lent_views_kept_before_on_item_batch_raised_under_skip(workers, prefetch):
    """Property: views kept by batches whose on_item_batch then raised (skip policy) keep their
    own items."""
    step = RaisesSometimes("views")
    run_batch_step(
        step,
        [{"items": list(range(48))}],
        batch_runtime(num_workers=workers, prefetch=prefetch, on_item_error="skip"),
    )
    assert len(step.kept) == 48 and step.errors == 4
    check_kept(step.kept)


class Shapes(BatchStep):
    def __init__(self, make):
        super().__init__(4, "items")
        self.got = []
        self.load_fn_params = {"make": make}

    @staticmethod
    def load_fn(item, make):
        if make == "empty":  # no detections in this image: a [0] tensor
            return torch.zeros(0)
        if make == "no_boxes":  # a [0, 4] box tensor
            return torch.zeros(0, 4)
        return torch.sparse_coo_tensor([[0]], [float(item)], (3,))

    def on_item_batch(self, outputs, items, notes):
        self.got += [(i, tuple(o.shape), o.to_dense().sum().item()) for i, o in zip(items, outputs)]


@pytest.mark.parametrize("make", ["empty", "no_boxes", "sparse"])
def test_load_fn_values_that_num_workers_0_takes_load_with_process_workers(make):
    """load_fn returning zero-element tensors (an image with no detections: shape [0] or [0, 4])
    or sparse tensors loads with num_workers=0, but with process workers the step fails as a
    whole: the lent view of an empty ring slot makes ``torch.frombuffer`` raise "both buffer
    length (64) and count (0) must not be 0"; a sparse batch makes the worker's
    ``torch.stack(out=<strided slot>)`` raise NotImplementedError. Both bare torch errors, not
    naming the step. Process workers must give what num_workers=0 gives."""
    inline = Shapes(make)
    run_batch_step(inline, [{"items": list(range(8))}], batch_runtime(num_workers=0))
    assert len(inline.got) == 8
    pooled = Shapes(make)
    run_batch_step(pooled, [{"items": list(range(8))}], batch_runtime(num_workers=2))
    assert pooled.got == inline.got


class ReturnsGenerator(BatchStep):
    """load_fn returns a value that cannot be pickled (a lazy frame reader: a generator; an
    open file, a VideoCapture, an h5py dataset)."""

    def __init__(self):
        super().__init__(2, "items")
        self.got = []

    @staticmethod
    def load_fn(item):
        return {"i": item, "frames": (f for f in range(3))}

    def on_item_batch(self, outputs, items, notes):
        self.got += [o["i"] for o in outputs]


def test_a_load_fn_value_that_cannot_be_pickled_fails_promptly_never_hangs():
    """With process workers, a load_fn value that cannot be pickled back to the step is dropped
    by the worker's result-queue feeder thread (it prints the TypeError to stderr): the step
    waits forever, warning "no progress ... waiting in load_fn" (load_fn had returned). It must
    fail promptly naming the step and the pickling problem (or, under skip, skip those items;
    thread workers and num_workers=0 take such values)."""
    step = ReturnsGenerator()
    hung, outcome = run_or_unstick(
        lambda: run_batch_step(
            step, [{"items": list(range(6))}], batch_runtime(), label="step 2 (GenStep)"
        )
    )
    assert not hung, "the step hung waiting for batches its workers could not send"
    assert "err" in outcome, step.got
    err = str(outcome["err"])
    assert "GenStep" in err and "pickle" in err.lower(), err


class SomeReturnGenerators(BatchStep):
    """Every third item's load_fn value holds a generator (cannot be pickled back)."""

    def __init__(self):
        super().__init__(2, "items")
        self.got = []

    @staticmethod
    def load_fn(item):
        return {"i": item, "frames": (f for f in range(3))} if item % 3 == 0 else {"i": item}

    def on_item_batch(self, outputs, items, notes):
        self.got += [o["i"] for o in outputs]


def test_under_skip_only_the_items_whose_values_cannot_be_pickled_are_skipped():
    """The batch the worker could not send comes back without those values: the other items of
    the same batch load, and each skipped item's error names the pickling problem."""
    step = SomeReturnGenerators()
    result = run_batch_step(
        step,
        [{"items": list(range(9))}],
        batch_runtime(on_item_error="skip"),
        label="step 2 (GenStep)",
    )
    assert step.got == [1, 2, 4, 5, 7, 8]
    assert [e.item_index for e in result.errors] == [0, 3, 6]
    assert all("cannot pickle 'generator'" in e.error for e in result.errors)
    assert all("worker_type: thread" in e.error for e in result.errors)


class Plain(BatchStep):
    def __init__(self):
        super().__init__(4, "items")

    @staticmethod
    def load_fn(item):
        return torch.full((64, 64), float(item))

    def on_item_batch(self, outputs, items, notes):
        return None


def test_ring_blocks_leave_dev_shm_with_the_file_system_sharing_strategy():
    """``torch.multiprocessing.set_sharing_strategy("file_system")`` (the usual fix for "too many
    open files") makes the ring's blocks named files in /dev/shm. A plain DataLoader's tensors
    are unlinked when the last holder drops them; the ring's stay after the step ended, its
    workers were joined and the step process dropped everything (until the process exits):
    each run of a step in a long-lived process (in-process runs, a stream's op) leaves
    workers x (prefetch + 1) batch-sized files behind, until /dev/shm is full (the default
    in-process executor runs every batch step of a run in one process: a container's 64 MiB
    /dev/shm fills after a few steps, and later ones fall back to pipes). The workers leave by
    ``os._exit`` without dropping their ring, so the blocks' shared refcount never reaches 0."""
    import torch.multiprocessing as tmp

    old = tmp.get_sharing_strategy()
    before = shm_names()
    tmp.set_sharing_strategy("file_system")
    try:
        run_batch_step(Plain(), [{"items": list(range(32))}], batch_runtime(num_workers=2))
        gc.collect()
        left = {n for n in shm_left(before, grace_s=3) if n.startswith("torch_")}
    finally:
        tmp.set_sharing_strategy(old)
    assert not left, f"{len(left)} ring blocks left in /dev/shm after the step: {sorted(left)[:4]}"
