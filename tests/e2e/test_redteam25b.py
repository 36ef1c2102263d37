"""Red team 25b: what tests/e2e/test_redteam25.py missed in lent ring slots, kept pools across a
stream's chunks and automatic worker priority. Real worker processes, real /dev/shm, real kills."""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import threading
import time

import pytest
import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch import run_batch_step
from dagster_graphbook.execution.pools.batch_pools import BatchPools
from tests.e2e.test_redteam25 import ENV_NODES, _kids, _settings

# ---------------------------------------------------------------------------------------------
# Kept pools: a later chunk's items travel through the task pipe


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


def _run_or_unstick(run, workers=None, wait_s=6.0):
    """``run()`` in a thread: ``(hung, outcome)``. When it is still running after ``wait_s``,
    its loader workers (``workers()``, else the children of this process started since) are
    SIGKILLed so that it ends (the loader then sees them dead), and ``hung`` is True."""
    before = _kids()
    outcome = {}

    def target():
        try:
            outcome["ok"] = run()
        except BaseException as exc:  # noqa: BLE001 - the failure is what is tested
            outcome["err"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(wait_s)
    hung = thread.is_alive()
    if hung:
        for pid in workers() if workers else _kids() - before:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        thread.join(10)
    return hung, outcome


def test_a_later_chunks_unpicklable_items_load_or_fail_promptly_never_hang():
    """A stream's chunk 1 loads items that cannot be pickled (the workers were forked with them);
    chunk 2's are sent to the kept workers with their tasks, and multiprocessing's queue feeder
    thread only prints the pickling error and drops the task: the step then waits forever for
    that batch (the stall warning repeats, nothing fails). It must load them as chunk 1 did (as
    pools made per chunk do), or fail at once naming the step and the pickling problem."""
    label = "step 3 (LockStep)"
    pools = BatchPools(keep=True)
    step = LockItems()
    cfg = _settings(num_workers=2, prefetch=1)
    try:
        run_batch_step(step, _lock_items(0, 4), cfg, pools=pools, label=label)
        assert step.got == [0.0, 1.0, 2.0, 3.0]
        hung, outcome = _run_or_unstick(
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
    hung, outcome = _run_or_unstick(
        lambda: run_batch_step(
            step, [{"items": list(range(6))}], _settings(), label="step 2 (GenStep)"
        )
    )
    assert not hung, "the step hung waiting for batches its workers could not send"
    assert "err" in outcome, step.got
    err = str(outcome["err"])
    assert "GenStep" in err and "pickle" in err.lower(), err


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
            run_batch_step(step, chunk, _settings(), pools=pools)
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
                _settings(num_workers=workers, on_item_error="skip"),
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
                _settings(on_item_error="skip"),
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
            run_batch_step(step, chunk, _settings(num_workers=workers), pools=pools)
    finally:
        pools.close()
    assert step.got == [0.0, 1.0, 2.0, 3.0, 40.0, 50.0, 60.0, 70.0], step.got


# ---------------------------------------------------------------------------------------------
# Lent ring slots: what load_fn may return


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
    run_batch_step(inline, [{"items": list(range(8))}], _settings(num_workers=0))
    assert len(inline.got) == 8
    pooled = Shapes(make)
    run_batch_step(pooled, [{"items": list(range(8))}], _settings(num_workers=2))
    assert pooled.got == inline.got


# ---------------------------------------------------------------------------------------------
# Automatic worker priority


class DumpsLater(BatchStep):
    """Model-bound (on_item_batch sleeps); dumps only from item 24 on (a step that saves some
    batches: the dump pool's processes start after the priority was decided)."""

    def __init__(self, folder):
        super().__init__(2, "items")
        self.folder = folder

    @staticmethod
    def load_fn(item):
        return torch.full((2,), float(item))

    def on_item_batch(self, outputs, items, notes):
        time.sleep(0.02)
        if items[0] < 24:
            return None
        return [(os.path.join(self.folder, f"{i}.txt"),) for i in items]

    @staticmethod
    def dump_fn(path):
        with open(path, "w") as f:
            f.write(f"{os.getpid()} {os.getpriority(os.PRIO_PROCESS, 0)}")


def test_auto_priority_lowers_dump_workers_started_after_the_decision(tmp_path):
    """A model-bound step's workers are lowered by 10 (its stats say worker_nice 10), but
    ProcessPoolExecutor starts its processes at the first submit: a step whose first dumps come
    after the decision gets dump workers at the step's own nice (their initializer got
    worker_nice -1 -> 0, and the renice found no process to lower)."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    result = run_batch_step(DumpsLater(str(tmp_path)), [{"items": list(range(40))}], _settings())
    assert result.stats["worker_nice"] == 10
    seen = {p.read_text() for p in tmp_path.iterdir()}
    assert len(list(tmp_path.iterdir())) == 16
    nices = {int(s.split()[1]) for s in seen}
    assert nices == {min(19, base + 10)}, f"dump workers ran at nice {nices}: (pid nice) {seen}"


_DECODER = None  # a loader worker's own thread pool (OpenCV's, a decoder library's)


def _decode(item):
    return torch.full((2,), float(item))


class ThreadedLoad(BatchStep):
    """load_fn does its work in a thread pool of the worker's own (made on first use, as
    OpenCV, OpenBLAS or an image decoder make theirs); the model is the bottleneck."""

    def __init__(self):
        super().__init__(2, "items")

    @staticmethod
    def load_fn(item):
        global _DECODER
        if _DECODER is None:
            from concurrent.futures import ThreadPoolExecutor

            _DECODER = ThreadPoolExecutor(2, thread_name_prefix="decoder")
        return _DECODER.submit(_decode, item).result()

    def on_item_batch(self, outputs, items, notes):
        time.sleep(0.02)


def _thread_nices(pid):
    nices = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            nices[int(tid)] = int(f.read().rsplit(")", 1)[1].split()[16])
    return nices


def test_auto_priority_lowers_every_thread_of_a_worker_process():
    """On Linux a nice value is per thread: ``renice([worker pid])`` lowers the worker's main
    thread only. Threads the worker already has (the decoder pool doing load_fn's work, the
    result queue's feeder) stay at the step's priority, so the step's "lowered by nice 10"
    leaves the loading work competing with the model as before."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    pools = BatchPools(keep=True)
    try:
        result = run_batch_step(
            ThreadedLoad(), [{"items": list(range(40))}], _settings(), pools=pools
        )
        assert result.stats["worker_nice"] == 10
        seen = {w.pid: _thread_nices(w.pid) for w in pools.process_loader._it._workers}
    finally:
        pools.close()
    assert all(len(threads) > 1 for threads in seen.values()), seen
    low = min(19, base + 10)
    assert all(n == low for threads in seen.values() for n in threads.values()), seen


# ---------------------------------------------------------------------------------------------
# /dev/shm


class Plain(BatchStep):
    def __init__(self):
        super().__init__(4, "items")

    @staticmethod
    def load_fn(item):
        return torch.full((64, 64), float(item))

    def on_item_batch(self, outputs, items, notes):
        return None


def _torch_shm() -> set:
    return {n for n in os.listdir("/dev/shm") if n.startswith("torch_")}


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
    before = _torch_shm()
    tmp.set_sharing_strategy("file_system")
    try:
        run_batch_step(Plain(), [{"items": list(range(32))}], _settings(num_workers=2))
        gc.collect()
        deadline = time.monotonic() + 3
        while (_torch_shm() - before) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _torch_shm() - before
    finally:
        tmp.set_sharing_strategy(old)
    assert not left, f"{len(left)} ring blocks left in /dev/shm after the step: {sorted(left)[:4]}"


# ---------------------------------------------------------------------------------------------
# Launchpad multiprocess from the preloaded forkserver


def test_multiprocess_run_sees_env_set_after_something_else_started_the_forkserver(
    tmp_path, run_wf, monkeypatch
):
    """``forkserver_with_this_environment`` records the environment at the first run's executor
    start and compares later runs with it; a forkserver started earlier by other code in the
    process (a loader with start_method forkserver, a library's multiprocessing pool; Python
    3.14's default start method) is taken as started with the run's environment, so the step
    process sees the environment from before the run's process changed it."""
    import multiprocessing

    from dagster_graphbook.defs import executor
    from tests.conftest import step_node, write_nodes, write_workflow

    # as in a process where no run started the forkserver yet (one already running, started
    # by an earlier test, was started with another environment: the case tested too)
    monkeypatch.setattr(executor, "_FORKSERVER_ENV", None, raising=False)
    os.environ["REDTEAM25_VAR"] = "before"
    try:
        ctx = multiprocessing.get_context("forkserver")
        proc = ctx.Process(target=os.getpid)
        proc.start()
        proc.join(30)
        os.environ["REDTEAM25_VAR"] = "after"
        nodes = write_nodes(tmp_path / "nodes", "env_nodes.py", ENV_NODES)
        out = tmp_path / "env.txt"
        wf = write_workflow(
            tmp_path, "env", [step_node("1", "Env", {"out": str(out)}, source=True)], []
        )
        cfg = {"execution": {"config": {"multiprocess": {}}}}
        run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
        assert run.success, run.failure
        seen = out.read_text()
    finally:
        os.environ.pop("REDTEAM25_VAR", None)
    assert seen == "after", f"the step process saw REDTEAM25_VAR={seen!r}"


# ---------------------------------------------------------------------------------------------
# die_with_the_run

SLOW_NODES = """
    import os
    import time

    from graphbook import param, source, step


    @step("Z/Slow")
    @source()
    @param("out", "string")
    def slow(ctx):
        with open(ctx.out + ".started", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(1.5)
        with open(ctx.out, "w") as f:
            f.write("done")
        yield {"out": {"pid": os.getpid()}}
"""


def _run_in_child(wf, nodes, home):
    from dagster_graphbook import run_workflow

    run = run_workflow(
        str(wf), custom_nodes=[str(nodes)], params={}, dagster_home=str(home), executor="in_process"
    )
    os._exit(0 if run.success else 3)


def test_an_in_process_run_in_a_process_started_from_a_thread_outlives_that_thread(tmp_path):
    """A job queue or web app starts each run in a ``multiprocessing.Process`` from a worker
    thread that then goes on (or ends). ``die_with_the_run`` (run_op) takes that launcher for a
    multiprocess run and sets the parent-death signal, which Linux sends when the *thread* that
    forked the process ends: the in-process run is SIGKILLed mid-step (exit code -9), though its
    launcher process is alive. Runs in process are meant to be left alone."""
    import multiprocessing

    from tests.conftest import step_node, write_nodes, write_workflow

    nodes = write_nodes(tmp_path / "nodes", "slow_nodes.py", SLOW_NODES)
    out = tmp_path / "out.txt"
    wf = write_workflow(
        tmp_path, "slow", [step_node("1", "Slow", {"out": str(out)}, source=True)], []
    )
    home = tmp_path / "home"
    home.mkdir()
    procs = []

    def launcher():
        proc = multiprocessing.get_context("fork").Process(
            target=_run_in_child, args=(wf, nodes, home)
        )
        proc.start()
        procs.append(proc)
        deadline = time.monotonic() + 20
        while not os.path.exists(f"{out}.started") and time.monotonic() < deadline:
            time.sleep(0.05)
        # the thread ends here, while the run's step goes on

    thread = threading.Thread(target=launcher)
    thread.start()
    thread.join(30)
    proc = procs[0]
    proc.join(30)
    if proc.is_alive():
        proc.kill()
    assert os.path.exists(f"{out}.started"), "the run never started its step"
    assert proc.exitcode == 0, f"the run's process ended with {proc.exitcode}"
    assert out.read_text() == "done"


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
        _settings(on_item_error="skip"),
        label="step 2 (GenStep)",
    )
    assert step.got == [1, 2, 4, 5, 7, 8]
    assert [e.item_index for e in result.errors] == [0, 3, 6]
    assert all("cannot pickle 'generator'" in e.error for e in result.errors)
    assert all("worker_type: thread" in e.error for e in result.errors)
