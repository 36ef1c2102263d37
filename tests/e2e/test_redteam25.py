"""Red team 25: lent ring slots, kept pools across a stream's chunks, automatic worker priority,
launchpad multiprocess from the preloaded forkserver. Real worker processes, real files."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest
import torch

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch import run_batch_step
from dagster_graphbook.plan.settings import BatchRuntime

KEPT = []  # module global a step stashes lent tensors in (a common "debug" pattern)


def _settings(**kw):
    return BatchRuntime(**{**dict(num_workers=2, device="cpu", start_method="fork"), **kw})


def _shm() -> set:
    return set(os.listdir("/dev/shm"))


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


def _check_kept(pairs):
    bad = [(i, float(_value(v).flatten()[0])) for i, v in pairs if bool((_value(v) != i).any())]
    assert not bad, f"kept tensors hold another batch's data: (item, seen) {bad[:6]}"


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
    before = _shm()
    for workers, prefetch in [(1, 1), (2, 2), (3, 3), (4, 1)]:
        KEPT.clear()
        step = Keeper(how)
        notes = [{"items": list(range(48))}]
        run_batch_step(step, notes, _settings(num_workers=workers, prefetch=prefetch))
        pairs = step.kept + list(KEPT) + list(notes[0].get("kept", []))
        if how != "late":
            assert len(pairs) == 48, (workers, prefetch, len(pairs))
        _check_kept(pairs)
    KEPT.clear()
    assert not (_shm() - before), _shm() - before


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
            _settings(num_workers=workers, prefetch=prefetch, on_item_error="skip"),
        )
        assert len(step.kept) == 60 - len([i for i in range(60) if i % 7 == 3])
        _check_kept(step.kept)


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
        _settings(num_workers=2, prefetch=2, worker_type=worker_type, max_dumps_in_flight=8),
    )
    seen = {i: (tmp_path / f"{i}.txt").read_text() for i in range(40)}
    assert seen == {i: str(i) for i in range(40)}


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
        run_batch_step(Handoff("none"), [{"items": list(range(24))}], _settings(prefetch=1))
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
    run_batch_step(inline, [{"items": list(range(8))}], _settings(num_workers=0))
    assert inline.got == [float(i) for i in range(8)]
    run_batch_step(pooled, [{"items": list(range(8))}], _settings(num_workers=2))
    assert pooled.got == inline.got


# ---------------------------------------------------------------------------------------------
# Kept pools across a stream's chunks


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
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

    pools = BatchPools(keep=True)
    step = step_cls()
    try:
        for chunk in chunks:
            run_batch_step(step, chunk, _settings(**kw), pools=pools)
    finally:
        pools.close()
    return step


def test_kept_pools_give_load_fn_the_items_the_default_mode_gives():
    """Later chunks' tensor items travel by value: load_fn must see the same dtype, shape,
    requires_grad and values as with pools made per chunk."""
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

    kept = _streamed(Seer, _chunks())
    per_chunk = Seer()
    for chunk in _chunks():
        run_batch_step(per_chunk, chunk, _settings(), pools=BatchPools(keep=False))
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
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

    pools = BatchPools(keep=True)
    step = Keeper(how)
    try:
        for k in range(4):
            chunk = [{"items": list(range(k * 10, k * 10 + 10))}]
            run_batch_step(
                step, chunk, _settings(num_workers=workers, prefetch=prefetch), pools=pools
            )
    finally:
        pools.close()
    assert len(step.kept) == (40 if how == "views" else 8)
    _check_kept(step.kept)


def test_load_fn_raising_in_a_later_chunk_is_skipped_and_the_rest_loads():
    """Property: load_fn raising in chunk 3 under on_item_error skip skips that item only."""
    chunks = [[{"items": list(range(k * 10, k * 10 + 10))}] for k in range(4)]
    step = _streamed(Skipper, chunks, on_item_error="skip")
    expected = [(i, float(i)) for i in range(40) if i != 23]
    assert step.got == expected


class Slow(BatchStep):
    def __init__(self):
        super().__init__(2, "items")

    @staticmethod
    def load_fn(item):
        return torch.full((2,), float(item))

    def on_item_batch(self, outputs, items, notes):
        pass


def _kids():
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize("when", ["between_chunks", "mid_chunk"])
def test_a_kept_loader_worker_killed_in_a_later_chunk_fails_naming_the_step(when):
    """SIGKILL of a kept loader worker in chunk 2: the step fails within seconds, with an error
    that names the step (never a hang, never torch's bare message), and no worker is left."""
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

    before = _kids()
    pools = BatchPools(keep=True)
    step = Slow()
    label = "step 7 (RedStep)"
    cfg = _settings(num_workers=2, prefetch=1)
    run_batch_step(step, [{"items": list(range(10))}], cfg, pools=pools, label=label)
    workers = [p for p in _kids() - before]
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
    assert not (_kids() - before), "processes left after the step failed"
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
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

    before = _kids()
    pools = BatchPools(keep=True)
    label = "step 8 (RedDump)"
    cfg = _settings(num_workers=1, dump_pool_size=1)
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
    while _kids() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (_kids() - before)


def test_a_stream_whose_first_chunk_is_empty_loads_the_later_ones():
    """Property: a first chunk with zero items still leaves kept pools that load later chunks."""
    chunks = [[{"rows": []}]] + _chunks()[:2]
    step = _streamed(Seer, chunks)
    assert len(step.seen) == 7


def test_terminate_mid_stream_leaves_no_processes():
    """Property: a step interrupted (KeyboardInterrupt in on_item_batch) mid chunk 2 closes its
    kept pools: no child processes outlive it."""
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

    class Interrupt(Slow):
        @staticmethod
        def dump_fn(x):
            pass

        def on_item_batch(self, outputs, items, notes):
            if items[0] == 14:
                raise KeyboardInterrupt
            return [(o,) for o in outputs]

    before = _kids()
    pools = BatchPools(keep=True)
    step = Interrupt()
    cfg = _settings(num_workers=2)
    with pytest.raises((KeyboardInterrupt, RuntimeError)):
        try:
            for k in range(3):
                chunk = [{"items": list(range(k * 10, k * 10 + 10))}]
                run_batch_step(step, chunk, cfg, pools=pools)
        finally:
            pools.close(abort=True)
    deadline = time.monotonic() + 10
    while _kids() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (_kids() - before)


# ---------------------------------------------------------------------------------------------
# Automatic worker priority


class ModelBound(BatchStep):
    def __init__(self):
        super().__init__(2, "items")
        self.nice_seen = []

    @staticmethod
    def load_fn(item):
        return torch.full((2,), float(item))

    def on_item_batch(self, outputs, items, notes):
        time.sleep(0.02)
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
            _settings(num_workers=num_workers, worker_type=worker_type),
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
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

    pools = BatchPools(keep=True)
    step = ModelBound()
    stats = []
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        for k in range(4):
            chunk = [{"items": list(range(k * 12, k * 12 + 12))}]
            stats.append(run_batch_step(step, chunk, _settings(), pools=pools).stats)
        workers = [w.pid for w in pools.process_loader._it._workers]
        nices = {os.getpriority(os.PRIO_PROCESS, pid) for pid in workers}
    finally:
        pools.close()
    assert nices == {min(19, base + 10)}, nices
    assert [s["worker_nice"] for s in stats][-1] == 10, stats


# ---------------------------------------------------------------------------------------------
# Launchpad multiprocess from the preloaded forkserver

ENV_NODES = """
    import os

    from graphbook import param, source, step


    @step("E/Env")
    @source()
    @param("out", "string")
    def env(ctx):
        with open(ctx.out, "w") as f:
            f.write(os.environ.get("REDTEAM25_VAR", "<unset>"))
        yield {"out": {"pid": os.getpid()}}
"""


def test_launchpad_multiprocess_sees_env_vars_set_after_the_forkserver_started(tmp_path, run_wf):
    """A run in a process whose forkserver was started by an earlier run: the step process must
    see the environment the run's process has now (as spawn would give it), not the forkserver's
    from its start."""
    from tests.conftest import step_node, write_nodes, write_workflow

    nodes = write_nodes(tmp_path / "nodes", "env_nodes.py", ENV_NODES)
    cfg = {
        "execution": {"config": {"multiprocess": {"max_concurrent": 1, "retries": {"enabled": {}}}}}
    }
    outs = []
    os.environ.pop("REDTEAM25_VAR", None)
    try:
        for k, value in enumerate(["first", "second"]):
            os.environ["REDTEAM25_VAR"] = value
            out = tmp_path / f"env{k}.txt"
            wf = write_workflow(
                tmp_path, f"env{k}", [step_node("1", "Env", {"out": str(out)}, source=True)], []
            )
            run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
            assert run.success, run.failure
            outs.append(out.read_text())
    finally:
        os.environ.pop("REDTEAM25_VAR", None)
    assert outs == ["first", "second"], outs


def test_launchpad_multiprocess_keeps_max_concurrent_and_tag_limits(tmp_path, run_wf):
    """Property: max_concurrent, retries and tag_concurrency_limits named with multiprocess are
    accepted and the run succeeds from the forkserver."""
    from tests.conftest import step_node, write_nodes, write_workflow

    nodes = write_nodes(tmp_path / "nodes", "env_nodes.py", ENV_NODES)
    out = tmp_path / "env.txt"
    wf = write_workflow(
        tmp_path, "env", [step_node("1", "Env", {"out": str(out)}, source=True)], []
    )
    cfg = {
        "execution": {
            "config": {
                "multiprocess": {
                    "max_concurrent": 2,
                    "retries": {"enabled": {}},
                    "tag_concurrency_limits": [{"key": "x", "value": "y", "limit": 1}],
                }
            }
        }
    }
    run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
    assert run.success, run.failure
    assert out.exists()


CWD_NODES = """
    import os

    from graphbook import param, source, step


    @step("C/Cwd")
    @source()
    @param("out", "string")
    def cwd(ctx):
        with open(ctx.out, "w") as f:
            f.write(os.getcwd())
        yield {"out": {"pid": os.getpid()}}
"""


def test_launchpad_multiprocess_steps_run_in_the_runs_current_directory(tmp_path, run_wf):
    """Two launchpad-multiprocess runs from one process, the second after a chdir: its step
    process must run in the directory the run's process is in now (spawn's behaviour), not the
    one the forkserver started in."""
    from tests.conftest import step_node, write_nodes, write_workflow

    nodes = write_nodes(tmp_path / "nodes", "cwd_nodes.py", CWD_NODES)
    cfg = {"execution": {"config": {"multiprocess": {}}}}
    dirs = [tmp_path / "a", tmp_path / "b"]
    seen = []
    old = os.getcwd()
    try:
        for k, folder in enumerate(dirs):
            folder.mkdir()
            os.chdir(folder)
            out = tmp_path / f"cwd{k}.txt"
            wf = write_workflow(
                tmp_path, f"cwd{k}", [step_node("1", "Cwd", {"out": str(out)}, source=True)], []
            )
            run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
            assert run.success, run.failure
            seen.append(out.read_text())
    finally:
        os.chdir(old)
    assert seen == [str(d) for d in dirs], seen


def _stream_wf(tmp_path, n, **load):
    from tests.conftest import write_nodes
    from tests.execution.test_stream import NODES, _images_workflow

    nodes = write_nodes(tmp_path / "nodes", "stream_nodes.py", NODES)
    return _images_workflow(tmp_path, tmp_path / "trace.txt", n, **load), nodes


STREAM_CFG = {"ops": {"images__stream": {"config": {"streaming": {"queue_items": 16}}}}}
STREAM_PARAMS = {"LoadImages.runtime.num_workers": 2, "LoadImages.runtime.device": "cpu"}


def test_streamed_results_equal_the_default_mode_and_leave_nothing(tmp_path, run_wf):
    """Property: a stream of 5 chunks (kept pools, lent batches kept in notes by the guide's
    pattern) gives the default mode's results; no child process or /dev/shm entry is left."""
    before_kids, before_shm = _kids(), _shm()
    wf, nodes = _stream_wf(tmp_path, 72)
    streamed = run_wf(wf, [nodes], STREAM_PARAMS, streaming=True, run_config=STREAM_CFG)
    assert streamed.success, streamed.failure
    default = run_wf(wf, [nodes], STREAM_PARAMS)
    assert default.success, default.failure
    means = [n["mean"] for n in streamed["Reduce"]["out"]]
    assert means == [n["mean"] for n in default["Reduce"]["out"]]
    assert means == [float(i) * 3 * 64 * 64 / (3 * 64 * 64) for i in range(72)]
    deadline = time.monotonic() + 5
    while (_kids() - before_kids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (_kids() - before_kids)
    assert not (_shm() - before_shm)


def test_streamed_loader_worker_killed_in_chunk_three_fails_naming_the_step(tmp_path, run_wf):
    """Property: a kept loader worker SIGKILLed in a later chunk of a real stream fails the run
    promptly with an error naming the step; no worker is left behind."""
    before = _kids()
    wf, nodes = _stream_wf(tmp_path, 64, kill_item="img-40")
    start = time.monotonic()
    run = run_wf(wf, [nodes], STREAM_PARAMS, streaming=True, run_config=STREAM_CFG)
    assert not run.success
    assert time.monotonic() - start < 25
    assert "LoadImages" in str(run.failure) and "died" in str(run.failure), run.failure
    deadline = time.monotonic() + 5
    while (_kids() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (_kids() - before)


class Nothing(Keeper):
    def on_item_batch(self, outputs, items, notes):
        self.kept.append(float(outputs[0][0, 0]))


@pytest.mark.parametrize("dump", [False, True], ids=["no-dump", "dump"])
def test_a_step_that_keeps_nothing_stays_lent_through_the_driver(dump):
    """Property (the point of lending): through run_batch_step, a step that keeps nothing of its
    batches is lent every batch (no slot retired, no fall back to copies)."""
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

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
        run_batch_step(step, [{"items": list(range(40))}], _settings(), pools=pools)
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
        _settings(num_workers=workers, prefetch=prefetch, on_item_error="skip"),
    )
    assert len(step.kept) == 48 and step.errors == 4
    _check_kept(step.kept)


SLEEP_NODES = """
    import os
    import time

    from graphbook import param, source, step


    @step("Z/Sleeper")
    @source()
    @param("out", "string")
    def sleeper(ctx):
        with open(ctx.out, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
        yield {"out": {"pid": os.getpid()}}
"""

_RUN_SCRIPT = """
import sys
from dagster_graphbook import run_workflow
run_workflow(sys.argv[1], custom_nodes=[sys.argv[2]], params={}, dagster_home=sys.argv[3],
             executor="multiprocess",
             run_config={"execution": {"config": {"multiprocess": %s}}})
"""


@pytest.mark.parametrize(
    "chosen", ["{}", "{'start_method': {'spawn': {}}}"], ids=["plain", "spawn"]
)
def test_step_processes_do_not_outlive_a_killed_launchpad_multiprocess_run(tmp_path, chosen):
    """The run's process is SIGKILLed (OOM killer) while its step runs: the step process (forked
    from the forkserver, not a child of the run's process) must not go on running by itself."""
    import subprocess
    import sys

    from tests.conftest import step_node, write_nodes, write_workflow

    nodes = write_nodes(tmp_path / "nodes", "sleep_nodes.py", SLEEP_NODES)
    out = tmp_path / "pid.txt"
    wf = write_workflow(
        tmp_path, "sleepy", [step_node("1", "Sleeper", {"out": str(out)}, source=True)], []
    )
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN_SCRIPT % chosen, str(wf), str(nodes), str(home)],
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    step_pid = None
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (out.exists() and out.read_text()):
            time.sleep(0.1)
        assert out.exists(), "the step never started"
        step_pid = int(out.read_text())
        proc.kill()
        proc.wait(5)
        deadline = time.monotonic() + 5
        while psutil.pid_exists(step_pid) and time.monotonic() < deadline:
            try:
                if psutil.Process(step_pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.1)
        alive = psutil.pid_exists(step_pid) and (
            psutil.Process(step_pid).status() != psutil.STATUS_ZOMBIE
        )
        assert not alive, f"step process {step_pid} outlived its killed run by 5 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        if step_pid and psutil.pid_exists(step_pid):
            try:
                os.kill(step_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
