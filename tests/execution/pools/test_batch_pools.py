"""``BatchPools(keep=True)``: a stream's batch step keeps its loader and dump workers across its
chunks. A later chunk's items travel to the kept workers by value and load as the first chunk's
do (tensors numpy cannot hold, tensor subclasses, objects holding tensors, items that cannot be
pickled, load_fn_params set per note); a worker killed or a step interrupted in a later chunk
fails promptly naming the step and leaves no process; real streams give the default mode's
results. Real worker processes, real kills."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import psutil
import pytest
import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.execution.pools.batch_pools import BatchPools
from tests.execution.pools.pool_steps import (
    Keeper,
    batch_runtime,
    check_kept,
    child_pids,
    run_or_unstick,
    shm_left,
    shm_names,
)


class Seer(BatchStep):
    """Records what load_fn saw of each (tensor) item: dtype, shape, requires_grad, values."""

    def __init__(self):
        super().__init__(2, "rows")
        self.seen = []

    @staticmethod
    def load_fn(row):
        t = row["t"] if isinstance(row, dict) else row
        return (str(t.dtype), tuple(t.shape), bool(t.requires_grad), t.float().sum().item())

    def on_item_batch(self, outputs, items, notes):
        self.seen += list(outputs)


def _chunks():
    base = torch.arange(64, dtype=torch.float32).view(8, 8)
    return [
        [{"rows": [base[k].to(torch.bfloat16) for k in range(4)]}],
        [{"rows": [base[:, k] for k in range(3)]}],  # non-contiguous views
        [{"rows": []}],  # a chunk with zero items
        [{"rows": [{"t": base[k] * 2} for k in range(3)]}],  # dicts of tensors
        [{"rows": [base[k].clone().requires_grad_(True) for k in range(2)]}],
    ]


def _streamed(step_cls, chunks, **kw):
    pools = BatchPools(keep=True)
    step = step_cls()
    try:
        for chunk in chunks:
            run_batch_step(step, chunk, batch_runtime(**kw), pools=pools)
    finally:
        pools.close()
    return step


def test_kept_pools_give_load_fn_the_items_the_default_mode_gives():
    """Later chunks' tensor items travel by value: load_fn must see the same dtype, shape,
    requires_grad and values as with pools made per chunk."""

    kept = _streamed(Seer, _chunks())
    per_chunk = Seer()
    for chunk in _chunks():
        run_batch_step(per_chunk, chunk, batch_runtime(), pools=BatchPools(keep=False))
    assert kept.seen == per_chunk.seen


def _float8():
    return torch.ones(4).to(torch.float8_e4m3fn)


def _sparse():
    return torch.eye(4).to_sparse()


def _conj():
    return torch.ones(4, dtype=torch.cfloat).conj()  # lazy conjugate bit set


@pytest.mark.parametrize("make", [_float8, _sparse, _conj], ids=["float8", "sparse", "conj"])
def test_kept_pools_take_tensor_items_numpy_cannot_hold(make):
    """Items that are tensors numpy cannot represent (float8, sparse, a lazily conjugated view)
    load in a stream's later chunk as they do in its first (and in the default mode)."""
    chunks = [
        [{"rows": [make() for _ in range(2)]}],
        [{"rows": [make() for _ in range(2)]}],
    ]
    step = _streamed(Seer, chunks)
    assert len(step.seen) == 4
    assert step.seen[2:] == step.seen[:2]


class Skipper(BatchStep):
    def __init__(self):
        super().__init__(2, "items")
        self.got = []

    @staticmethod
    def load_fn(item):
        if item == 23:
            raise ValueError("bad item in chunk 3")
        return torch.full((2,), float(item))

    def on_item_batch(self, outputs, items, notes):
        self.got += [(i, float(o[0])) for i, o in zip(items, outputs)]


@pytest.mark.parametrize("workers,prefetch", [(1, 1), (2, 2), (3, 1)])
@pytest.mark.parametrize("how", ["views", "last"])
def test_tensors_kept_from_a_chunks_last_lent_batch_survive_later_chunks(how, workers, prefetch):
    """A stream's chunk whose last batch the step keeps (outputs in its notes, the usual way):
    the next chunks' loads must not overwrite them through the kept workers' ring slots."""

    pools = BatchPools(keep=True)
    step = Keeper(how)
    try:
        for k in range(4):
            chunk = [{"items": list(range(k * 10, k * 10 + 10))}]
            run_batch_step(
                step, chunk, batch_runtime(num_workers=workers, prefetch=prefetch), pools=pools
            )
    finally:
        pools.close()
    assert len(step.kept) == (40 if how == "views" else 8)
    check_kept(step.kept)


def test_load_fn_raising_in_a_later_chunk_is_skipped_and_the_rest_loads():
    """Property: load_fn raising in chunk 3 under on_item_error skip skips that item only."""
    chunks = [[{"items": list(range(k * 10, k * 10 + 10))}] for k in range(4)]
    step = _streamed(Skipper, chunks, on_item_error="skip")
    expected = [(i, float(i)) for i in range(40) if i != 23]
    assert step.got == expected


def test_a_stream_whose_first_chunk_is_empty_loads_the_later_ones():
    """Property: a first chunk with zero items still leaves kept pools that load later chunks."""
    chunks = [[{"rows": []}]] + _chunks()[:2]
    step = _streamed(Seer, chunks)
    assert len(step.seen) == 7


class LockItems(BatchStep):
    """Items are dicts that hold a lock (a source yielding records with a handle, a lock or a
    lambda): fine for workers forked with them, not picklable."""

    def __init__(self):
        super().__init__(2, "items")
        self.got = []

    @staticmethod
    def load_fn(item):
        return torch.full((2,), float(item["i"]))

    def on_item_batch(self, outputs, items, notes):
        self.got += [float(o[0]) for o in outputs]


def _lock_items(lo, hi):
    return [{"items": [{"i": i, "lock": threading.Lock()} for i in range(lo, hi)]}]


def test_a_later_chunks_unpicklable_items_load_or_fail_promptly_never_hang():
    """A stream's chunk 1 loads items that cannot be pickled (the workers were forked with them);
    chunk 2's are sent to the kept workers with their tasks, and multiprocessing's queue feeder
    thread only prints the pickling error and drops the task: the step then waits forever for
    that batch (the stall warning repeats, nothing fails). It must load them as chunk 1 did (as
    pools made per chunk do), or fail at once naming the step and the pickling problem."""
    label = "step 3 (LockStep)"
    pools = BatchPools(keep=True)
    step = LockItems()
    cfg = batch_runtime(num_workers=2, prefetch=1)
    try:
        run_batch_step(step, _lock_items(0, 4), cfg, pools=pools, label=label)
        assert step.got == [0.0, 1.0, 2.0, 3.0]
        hung, outcome = run_or_unstick(
            lambda: run_batch_step(step, _lock_items(4, 8), cfg, pools=pools, label=label),
            workers=lambda: [w.pid for w in pools.process_loader._it._workers],
        )
    finally:
        pools.close(abort=True)
    assert not hung, "chunk 2 with unpicklable items hung waiting for batches never sent"
    if "err" in outcome:
        err = str(outcome["err"])
        assert "LockStep" in err and "pickle" in err.lower(), err
    else:
        assert step.got == [float(i) for i in range(8)]


@dataclasses.dataclass
class Record:
    """An item that is an object holding a tensor (not a dict, list or tuple)."""

    image: torch.Tensor


class Normalises(BatchStep):
    """load_fn normalises the item's tensor in place (an augmentation written in place): with
    workers forked with the items, or sent a copy, that touches the worker's copy only."""

    def __init__(self):
        super().__init__(2, "items")
        self.got = []

    @staticmethod
    def load_fn(item):
        item.image.mul_(2)
        return item.image.clone()

    def on_item_batch(self, outputs, items, notes):
        self.got += [o.tolist() for o in outputs]


def test_a_later_chunks_object_items_are_sent_by_value_not_shared_with_the_workers():
    """``_by_value`` walks dicts, lists and tuples only: a tensor inside another object (a
    dataclass record) goes through torch's reducer, which moves the note's own tensor into
    /dev/shm in place and maps it in the worker. load_fn's in-place work then changes the
    step's note (chunk 2's images doubled, chunk 1's not), and a note's tensors (or the whole
    storage they view) end up in shared memory."""
    pools = BatchPools(keep=True)
    step = Normalises()
    chunks = [[{"items": [Record(torch.ones(3)) for _ in range(4)]}] for _ in range(2)]
    try:
        for chunk in chunks:
            run_batch_step(step, chunk, batch_runtime(), pools=pools)
    finally:
        pools.close()
    assert step.got == [[2.0, 2.0, 2.0]] * 8
    notes = [[r.image.tolist() for r in chunk[0]["items"]] for chunk in chunks]
    assert notes == [[[1.0, 1.0, 1.0]] * 4] * 2, f"load_fn changed the step's notes: {notes}"
    shared = [r.image.is_shared() for chunk in chunks for r in chunk[0]["items"]]
    assert not any(shared), f"notes' tensors moved to /dev/shm: {shared}"


class TypeSeer(BatchStep):
    def __init__(self):
        super().__init__(2, "items")
        self.seen = []

    @staticmethod
    def load_fn(item):
        return (type(item).__name__, str(item.format), tuple(item.canvas_size))

    def on_item_batch(self, outputs, items, notes):
        self.seen += list(outputs)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_later_chunks_tensor_subclass_items_keep_their_type_and_metadata(workers):
    """torchvision's ``tv_tensors`` (BoundingBoxes with their format and canvas size, Image,
    Mask) are tensor subclasses: chunk 1's load_fn gets them as they are, chunk 2's gets a plain
    Tensor (``PipedBatch`` rebuilds a ``torch.Tensor``), so ``item.format`` raises
    AttributeError there (or a v2 transform treats boxes as an image). With num_workers=0 too:
    there is no process to send the items to, but later chunks still go through ``_by_value``."""
    from torchvision import tv_tensors

    def boxes():
        return tv_tensors.BoundingBoxes(
            torch.tensor([[0, 0, 5, 5]]), format="XYXY", canvas_size=(10, 10)
        )

    pools = BatchPools(keep=True)
    step = TypeSeer()
    try:
        for _ in range(2):
            run_batch_step(
                step,
                [{"items": [boxes(), boxes()]}],
                batch_runtime(num_workers=workers, on_item_error="skip"),
                pools=pools,
            )
    finally:
        pools.close()
    first = ("BoundingBoxes", "BoundingBoxFormat.XYXY", (10, 10))
    assert step.seen == [first] * 4, step.seen


class Describes(BatchStep):
    """load_fn describes the tensor item it got: type, dtype, layout, quantized, nested, sum."""

    def __init__(self):
        super().__init__(2, "items")
        self.seen = []

    @staticmethod
    def load_fn(t):
        dense = t.dequantize() if t.is_quantized else t
        if dense.is_nested:
            dense = torch.cat([x.flatten() for x in dense.unbind()])
        return (type(t).__name__, str(t.dtype), t.is_quantized, t.is_nested, float(dense.sum()))

    def on_item_batch(self, outputs, items, notes):
        self.seen += list(outputs)


ODD_TENSORS = {
    "quantized": lambda: torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8),
    "nested": lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
    "parameter": lambda: torch.nn.Parameter(torch.ones(3)),
}


@pytest.mark.parametrize("kind", sorted(ODD_TENSORS))
def test_a_later_chunks_odd_tensor_items_load_as_in_the_first(kind):
    """``_by_value`` rebuilds a later chunk's tensor items through numpy bytes: a quantized
    item fails there (an item error: the bytes come back as quint8 without scale), a nested
    tensor item fails the whole step with torch's bare "reshape: For now nested reshape cannot
    change..." (no step named), an ``nn.Parameter`` comes back as a plain Tensor. All load in
    chunk 1 (forked with the items) and with pools made per chunk."""
    make = ODD_TENSORS[kind]
    pools = BatchPools(keep=True)
    step = Describes()
    try:
        for _ in range(2):
            run_batch_step(
                step,
                [{"items": [make(), make()]}],
                batch_runtime(on_item_error="skip"),
                pools=pools,
                label="step 4 (OddItems)",
            )
    finally:
        pools.close()
    assert len(step.seen) == 4 and step.seen[2:] == step.seen[:2], step.seen


class PerNoteScale(BatchStep):
    """Sets ``load_fn_params`` from each note in ``on_data`` (Graphbook puts the params on the
    load queue with each item, when its note is enqueued)."""

    def __init__(self):
        super().__init__(2, "items")
        self.got = []

    def on_data(self, note):
        self.load_fn_params = {"scale": note["scale"]}

    @staticmethod
    def load_fn(item, scale):
        return torch.full((2,), float(item * scale))

    def on_item_batch(self, outputs, items, notes):
        self.got += [float(o[0]) for o in outputs]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_later_chunks_load_fn_params_reach_the_kept_workers(workers):
    """``BatchPools.loader`` builds each chunk's ``ItemDataset`` with the step's current
    ``load_fn_params``, but ``aim`` only sends the items: the kept workers call load_fn with the
    params of the chunk they were forked in. Pools made per chunk (and Graphbook, which sends
    the params with each item) give chunk 2 its own. With num_workers=0 too: the kept
    single-process DataLoader still holds chunk 1's dataset."""
    pools = BatchPools(keep=True)
    step = PerNoteScale()
    try:
        for k, scale in enumerate((1, 10)):
            chunk = [{"items": list(range(k * 4, k * 4 + 4)), "scale": scale}]
            run_batch_step(step, chunk, batch_runtime(num_workers=workers), pools=pools)
    finally:
        pools.close()
    assert step.got == [0.0, 1.0, 2.0, 3.0, 40.0, 50.0, 60.0, 70.0], step.got


class Slow(BatchStep):
    def __init__(self):
        super().__init__(2, "items")

    @staticmethod
    def load_fn(item):
        return torch.full((2,), float(item))

    def on_item_batch(self, outputs, items, notes):
        pass


@pytest.mark.parametrize("when", ["between_chunks", "mid_chunk"])
def test_a_kept_loader_worker_killed_in_a_later_chunk_fails_naming_the_step(when):
    """SIGKILL of a kept loader worker in chunk 2: the step fails within seconds, with an error
    that names the step (never a hang, never torch's bare message), and no worker is left."""

    before = child_pids()
    pools = BatchPools(keep=True)
    step = Slow()
    label = "step 7 (RedStep)"
    cfg = batch_runtime(num_workers=2, prefetch=1)
    run_batch_step(step, [{"items": list(range(10))}], cfg, pools=pools, label=label)
    workers = [p for p in child_pids() - before]
    assert workers
    start = time.monotonic()
    err = None
    try:
        if when == "between_chunks":
            for pid in workers:
                if "pt_data_worker" in " ".join(psutil.Process(pid).cmdline()) or True:
                    os.kill(pid, signal.SIGKILL)
                    break
            time.sleep(0.3)
            run_batch_step(step, [{"items": list(range(10, 20))}], cfg, pools=pools, label=label)
        else:

            class Killer(Slow):
                def on_item_batch(self, outputs, items, notes):
                    if items[0] == 14:
                        for pid in workers:
                            try:
                                os.kill(pid, signal.SIGKILL)
                            except ProcessLookupError:
                                pass

            run_batch_step(
                Killer(), [{"items": list(range(10, 40))}], cfg, pools=pools, label=label
            )
    except BaseException as exc:  # noqa: BLE001 - the failure is what is tested
        err = exc
    finally:
        pools.close()
    took = time.monotonic() - start
    assert err is not None, "the run went on without its killed worker"
    assert took < 15, took
    time.sleep(0.5)
    assert not (child_pids() - before), "processes left after the step failed"
    assert "RedStep" in str(err), f"{type(err).__name__}: {err}"


class DumpsToo(Slow):
    def on_item_batch(self, outputs, items, notes):
        return [(o,) for o in outputs]

    @staticmethod
    def dump_fn(x):
        pass


def test_a_kept_dump_worker_killed_between_chunks_fails_naming_the_step():
    """Property: SIGKILL of a kept dump worker between chunks fails chunk 2 promptly, naming the
    step, and leaves no processes."""

    before = child_pids()
    pools = BatchPools(keep=True)
    label = "step 8 (RedDump)"
    cfg = batch_runtime(num_workers=1, dump_pool_size=1)
    err = None
    start = time.monotonic()
    try:
        run_batch_step(DumpsToo(), [{"items": list(range(10))}], cfg, pools=pools, label=label)
        dumper = list(pools.dumps.workers)
        assert dumper
        os.kill(dumper[0], signal.SIGKILL)
        time.sleep(0.3)
        run_batch_step(DumpsToo(), [{"items": list(range(10, 20))}], cfg, pools=pools, label=label)
    except BaseException as exc:  # noqa: BLE001 - the failure is what is tested
        err = exc
    finally:
        pools.close(abort=True)
    assert err is not None and time.monotonic() - start < 15
    assert "RedDump" in str(err), f"{type(err).__name__}: {err}"
    deadline = time.monotonic() + 5
    while child_pids() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (child_pids() - before)


def test_terminate_mid_stream_leaves_no_processes():
    """Property: a step interrupted (KeyboardInterrupt in on_item_batch) mid chunk 2 closes its
    kept pools: no child processes outlive it."""

    class Interrupt(Slow):
        @staticmethod
        def dump_fn(x):
            pass

        def on_item_batch(self, outputs, items, notes):
            if items[0] == 14:
                raise KeyboardInterrupt
            return [(o,) for o in outputs]

    before = child_pids()
    pools = BatchPools(keep=True)
    step = Interrupt()
    cfg = batch_runtime(num_workers=2)
    with pytest.raises((KeyboardInterrupt, RuntimeError)):
        try:
            for k in range(3):
                chunk = [{"items": list(range(k * 10, k * 10 + 10))}]
                run_batch_step(step, chunk, cfg, pools=pools)
        finally:
            pools.close(abort=True)
    deadline = time.monotonic() + 10
    while child_pids() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (child_pids() - before)


def _stream_wf(tmp_path, n, **load):
    from tests.execution.test_stream import _images_workflow
    from tests.support.nodes import copy_nodes

    nodes = copy_nodes(tmp_path / "nodes", "stream_nodes.py", "streamed_steps")
    return _images_workflow(tmp_path, tmp_path / "trace.txt", n, **load), nodes


STREAM_CFG = {"ops": {"images__stream": {"config": {"streaming": {"queue_items": 16}}}}}


STREAM_PARAMS = {"LoadImages.runtime.num_workers": 2, "LoadImages.runtime.device": "cpu"}


def test_streamed_results_equal_the_default_mode_and_leave_nothing(tmp_path, run_wf):
    """Property: a stream of 5 chunks (kept pools, lent batches kept in notes by the guide's
    pattern) gives the default mode's results; no child process or /dev/shm entry is left."""
    before_kids, before_shm = child_pids(), shm_names()
    wf, nodes = _stream_wf(tmp_path, 72)
    streamed = run_wf(wf, [nodes], STREAM_PARAMS, streaming=True, run_config=STREAM_CFG)
    assert streamed.success, streamed.failure
    default = run_wf(wf, [nodes], STREAM_PARAMS)
    assert default.success, default.failure
    means = [n["mean"] for n in streamed["Reduce"]["out"]]
    assert means == [n["mean"] for n in default["Reduce"]["out"]]
    assert means == [float(i) * 3 * 64 * 64 / (3 * 64 * 64) for i in range(72)]
    deadline = time.monotonic() + 5
    while (child_pids() - before_kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (child_pids() - before_kids)
    assert not shm_left(before_shm)


def test_streamed_loader_worker_killed_in_chunk_three_fails_naming_the_step(tmp_path, run_wf):
    """Property: a kept loader worker SIGKILLed in a later chunk of a real stream fails the run
    promptly with an error naming the step; no worker is left behind."""
    before = child_pids()
    wf, nodes = _stream_wf(tmp_path, 64, kill_item="img-40")
    start = time.monotonic()
    run = run_wf(wf, [nodes], STREAM_PARAMS, streaming=True, run_config=STREAM_CFG)
    assert not run.success
    assert time.monotonic() - start < 25
    assert "LoadImages" in str(run.failure) and "died" in str(run.failure), run.failure
    deadline = time.monotonic() + 5
    while (child_pids() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (child_pids() - before)
