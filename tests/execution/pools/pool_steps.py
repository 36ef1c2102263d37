"""What the pool tests share (tests/execution/test_loader_pool.py, test_pools.py, test_dump_pool.py,
test_priority.py): the runtime they run under, this process's children, a step that keeps what it
was lent, and a runner that unsticks a step that hangs."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import psutil
import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.plan.settings import BatchRuntime
from tests.support.leaks import shm_leaks, shm_snapshot

KEPT = []  # module global a step stashes lent tensors in (a common "debug" pattern)


def batch_runtime(**kw):
    return BatchRuntime(**{**dict(num_workers=2, device="cpu", start_method="fork"), **kw})


def shm_names() -> set:
    """``/dev/shm`` now; this process tree's entries are watched from here on (``shm_left``)."""
    return shm_snapshot()


def shm_left(before: set, grace_s: float = 2.0) -> set:
    """The ``/dev/shm`` entries made since ``before`` that this process's tree left: held by it,
    or by nobody once ``grace_s`` passed. /dev/shm is the machine's: an entry another program
    holds meanwhile (its multiprocessing semaphores, another test worker's blocks) is theirs."""
    me = psutil.Process()
    mine = {me.pid} | {p.pid for p in me.children(recursive=True)}
    return shm_leaks(before, mine, grace_s=grace_s)


def child_pids():
    return {p.pid for p in psutil.Process().children(recursive=True)}


class Keeper(BatchStep):
    """load_fn: item i -> a [3, 5] float tensor filled with i. on_item_batch keeps, by ``how``,
    something of the batch it was lent; the test then checks every kept value still holds its
    own item."""

    def __init__(self, how, batch_size=4, fail_every=0):
        super().__init__(batch_size, "items")
        self.how = how
        self.kept = []  # (item, value) pairs
        self.fail_every = fail_every
        self.load_fn_params = {"fail_every": fail_every}

    @staticmethod
    def load_fn(item, fail_every=0):
        if fail_every and item % fail_every == 3:
            raise ValueError(f"bad item {item}")
        return torch.full((3, 5), float(item))

    def on_item_batch(self, outputs, items, notes):
        how, n = self.how, len(self.kept)
        if how == "views":
            self.kept += list(zip(items, outputs))
        elif how == "slices":
            self.kept += [(i, o[1:, ::2]) for i, o in zip(items, outputs)]
        elif how == "numpy":
            self.kept += [(i, o.numpy()) for i, o in zip(items, outputs)]
        elif how == "late":  # keeps nothing for 5 batches, then everything
            if n or items[0] >= 20:
                self.kept += list(zip(items, outputs))
        elif how == "last":  # only a chunk's last batch (items 8, 9 of each ten)
            if items[-1] % 10 == 9:
                self.kept += list(zip(items, outputs))
        elif how == "closure":
            fns = [(lambda o=o: o) for o in outputs]
            self.kept += [(i, f) for i, f in zip(items, fns)]
        elif how == "global":
            KEPT.extend(zip(items, outputs))
        elif how == "stack":
            stacked = torch.stack(list(outputs))
            self.kept += [(i, stacked[k]) for k, i in enumerate(items)]
        elif how == "notes":
            for i, o, note in zip(items, outputs, notes):
                note.setdefault("kept", []).append((i, o))
        elif how == "memoryview":
            self.kept += [(i, memoryview(o.numpy())) for i, o in zip(items, outputs)]
        elif how == "dlpack":
            self.kept += [(i, torch.utils.dlpack.to_dlpack(o)) for i, o in zip(items, outputs)]
        return None


def _value(v):
    if callable(v):
        v = v()
    if type(v).__name__ == "PyCapsule":
        v = torch.utils.dlpack.from_dlpack(v)
    return torch.as_tensor(np.asarray(v))


def check_kept(pairs):
    bad = [(i, float(_value(v).flatten()[0])) for i, v in pairs if bool((_value(v) != i).any())]
    assert not bad, f"kept tensors hold another batch's data: (item, seen) {bad[:6]}"


def run_or_unstick(run, workers=None, wait_s=6.0):
    """``run()`` in a thread: ``(hung, outcome)``. When it is still running after ``wait_s``,
    its loader workers (``workers()``, else the children of this process started since) are
    SIGKILLed so that it ends (the loader then sees them dead), and ``hung`` is True."""
    before = child_pids()
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
        for pid in workers() if workers else child_pids() - before:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        thread.join(10)
    return hung, outcome
