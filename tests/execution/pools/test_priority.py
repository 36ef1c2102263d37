"""Automatic worker priority (``runtime.worker_nice``): a model-bound step lowers its pool
workers by nice 10 (every thread of each, dump workers started after the decision too) and never
the step's own process or its other threads; in a stream it decides once."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.execution.pools.batch_pools import BatchPools
from dagster_graphbook.plan.settings import BatchRuntime
from tests.execution.pools.pool_steps import batch_runtime

# the automatic priority is decided on how much of the step's time on_item_batch takes: never
# beside the soak (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("heavy_or_timed")


class ModelBound(BatchStep):
    def __init__(self):
        super().__init__(2, "items")
        self.nice_seen = []

    @staticmethod
    def load_fn(item):
        return torch.full((2,), float(item))

    def on_item_batch(self, outputs, items, notes):
        # well over the loaders' share even when the machine's other work delays them
        time.sleep(0.06)
        self.nice_seen.append(
            (os.getpriority(os.PRIO_PROCESS, 0), _thread_nice(threading.get_native_id()))
        )
        return [(o,) for o in outputs]

    @staticmethod
    def dump_fn(x):
        pass


def _thread_nice(tid):
    return os.getpriority(os.PRIO_PROCESS, tid)


@pytest.mark.parametrize("num_workers,worker_type", [(0, "process"), (2, "thread"), (2, "process")])
def test_auto_priority_never_lowers_the_step_or_its_other_threads(num_workers, worker_type):
    """Property: a model-bound step's automatic priority lowers only pool workers: the step's
    process, its calling thread and an unrelated thread of the process keep their nice value."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    other = {}
    stop = threading.Event()

    def bystander():
        other["tid"] = threading.get_native_id()
        stop.wait(30)

    t = threading.Thread(target=bystander, daemon=True)
    t.start()
    time.sleep(0.05)
    step = ModelBound()
    try:
        result = run_batch_step(
            step,
            [{"items": list(range(40))}],
            batch_runtime(num_workers=num_workers, worker_type=worker_type),
        )
    finally:
        stop.set()
    assert {n for pair in step.nice_seen for n in pair} == {base}
    assert _thread_nice(other["tid"]) == base
    assert os.getpriority(os.PRIO_PROCESS, 0) == base
    assert result.stats["worker_nice"] in (0, 10)


@pytest.mark.parametrize("value", [-2, 20, 100])
def test_worker_nice_outside_minus_one_to_19_is_refused(value):
    """Property: runtime.worker_nice outside -1..19 is a config error."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        BatchRuntime(worker_nice=value)


def test_auto_priority_in_a_stream_is_decided_once_and_reported_per_chunk():
    """Property: in a stream the decision is taken once; every chunk's stats give the workers'
    nice (not summed), and the kept loader workers are lowered by 10 exactly once."""

    pools = BatchPools(keep=True)
    step = ModelBound()
    stats = []
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        for k in range(4):
            chunk = [{"items": list(range(k * 12, k * 12 + 12))}]
            stats.append(run_batch_step(step, chunk, batch_runtime(), pools=pools).stats)
        workers = [w.pid for w in pools.process_loader._it._workers]
        nices = {os.getpriority(os.PRIO_PROCESS, pid) for pid in workers}
    finally:
        pools.close()
    assert nices == {min(19, base + 10)}, nices
    assert [s["worker_nice"] for s in stats][-1] == 10, stats


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
        time.sleep(0.06)  # model-bound on a loaded machine too, as ModelBound
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
    result = run_batch_step(
        DumpsLater(str(tmp_path)), [{"items": list(range(40))}], batch_runtime()
    )
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
        time.sleep(0.06)  # model-bound on a loaded machine too, as ModelBound


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
            ThreadedLoad(), [{"items": list(range(40))}], batch_runtime(), pools=pools
        )
        assert result.stats["worker_nice"] == 10
        seen = {w.pid: _thread_nices(w.pid) for w in pools.process_loader._it._workers}
    finally:
        pools.close()
    assert all(len(threads) > 1 for threads in seen.values()), seen
    low = min(19, base + 10)
    assert all(n == low for threads in seen.values() for n in threads.values()), seen
