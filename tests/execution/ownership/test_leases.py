"""GPU leases for concurrent shards (``dagster_graphbook/execution/ownership/leases.py``): real
processes holding real ``flock`` locks, killed for real; the GPU ids are given (this machine has
no GPU), which is all a lease reads of them. One real sharded run on the multiprocess executor.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from typing import Any, Optional, Sequence, Tuple

import dagster as dg
import pytest

from dagster_graphbook.execution.errors import StepFailure
from dagster_graphbook.execution.ownership.leases import (
    GPU_IDS_ENV,
    LEASE_DIR_ENV,
    VISIBLE,
    Lease,
    check_device,
    gpu_lease,
    gpu_pool,
    gpus_wanted,
    nvml_gpu_count,
)
from dagster_graphbook.plan.settings import BatchRuntime
from tests.support.mounts import can_make_read_only, read_only_switch
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow

LABEL = "workflow 'w', step 'S' (node 1)"
FORK = mp.get_context("fork")  # real processes, without re-importing Dagster in each


def _hold(conn: Any, pool: Sequence[str], per_gpu: int, wait_s: float, grandchild: bool) -> None:
    """A holder process: lease one GPU, report it, hold it until told, release, report."""

    def log(message: str) -> None:
        conn.send(("log", message))

    try:
        with gpu_lease(
            1, label=LABEL, owner=f"holder {os.getpid()}", log=log, per_gpu=per_gpu,
            wait_s=wait_s, progress_s=0.2, pool=pool,
        ) as lease:  # fmt: skip
            child = 0
            if grandchild:  # a loader worker forked while the lease is held
                child = os.fork()
                if child == 0:
                    time.sleep(30)
                    os._exit(0)
            conn.send(("leased", lease.ids, os.environ.get(VISIBLE), child))
            conn.recv()
        conn.send(("released", os.environ.get(VISIBLE)))
    except StepFailure as exc:
        conn.send(("failed", str(exc)))


class Holder:
    """A process leasing one GPU of ``pool``, driven through a pipe."""

    def __init__(
        self, pool: Sequence[str], per_gpu: int = 1, wait_s: float = 10, grandchild: bool = False
    ) -> None:
        self.conn, theirs = FORK.Pipe()
        self.process = FORK.Process(target=_hold, args=(theirs, pool, per_gpu, wait_s, grandchild))
        self.process.start()
        self.logs: list = []
        self.worker = 0  # the pid of the process it forked while holding its lease

    def next(self, kind: str, timeout: float = 5.0) -> Optional[Tuple[Any, ...]]:
        """The next message of ``kind`` within ``timeout`` seconds (logs are kept), else None."""
        deadline = time.monotonic() + timeout
        while self.conn.poll(max(0.0, deadline - time.monotonic())):
            message = self.conn.recv()
            if message[0] == kind:
                return message
            self.logs.append(message[1])
        return None

    def leased(self, timeout: float = 5.0) -> Tuple[str, ...]:
        message = self.next("leased", timeout)
        assert message is not None, f"no lease within {timeout} s: {self.logs}"
        assert message[2] == ",".join(message[1])  # CUDA_VISIBLE_DEVICES is the lease
        self.worker = message[3]
        return message[1]

    def release(self) -> None:
        self.conn.send("release")
        assert self.next("released") is not None
        self.process.join(5)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


@pytest.fixture
def holders(tmp_path, monkeypatch):
    """``holders(pool, ...)`` starts a Holder with its own lease folder; all stopped at the end."""
    monkeypatch.setenv(LEASE_DIR_ENV, str(tmp_path / "leases"))
    started: list = []

    def start(pool: Sequence[str], **kwargs: Any) -> Holder:
        started.append(Holder(pool, **kwargs))
        return started[-1]

    yield start
    for holder in started:
        holder.stop()


def test_concurrent_shards_never_share_a_gpu_and_a_third_waits(holders):
    """Two holders of a 2-GPU pool get different GPUs; a third waits, saying who holds them,
    until one is released, then gets that one."""
    pool = ("0", "1")
    a, b = holders(pool), holders(pool)
    got_a, got_b = a.leased(), b.leased()
    assert {got_a, got_b} == {("0",), ("1",)}
    c = holders(pool)
    assert c.next("leased", timeout=0.6) is None  # all leased: it waits
    waiting = " ".join(c.logs)
    assert "waiting" in waiting and f"holder {a.process.pid}" in waiting, waiting
    a.release()
    assert c.leased() == got_a
    assert not a.process.exitcode


def test_a_killed_holder_frees_its_gpu_even_with_a_live_worker(holders):
    """``kill -9`` of the holder: the kernel drops its lock, though a process it forked (a
    loader worker) still lives; the waiting one gets the GPU."""
    a = holders(("0",), grandchild=True)
    assert a.leased() == ("0",)
    b = holders(("0",))
    assert b.next("leased", timeout=0.4) is None
    os.kill(a.process.pid, signal.SIGKILL)
    while a.process.exitcode is None:  # not join(): the worker holds the process's sentinel
        time.sleep(0.02)
    assert a.process.exitcode == -signal.SIGKILL
    try:
        assert b.leased(timeout=3) == ("0",)
        os.kill(a.worker, 0)  # the worker still lives: the kernel freed the lease regardless
    finally:
        os.kill(a.worker, signal.SIGKILL)


def test_shards_per_gpu_lets_two_share_one_and_spreads_first(holders):
    """``shards_per_gpu: 2``: two shards on one GPU, the third waits; with two GPUs the first
    two shards get one each (spread before sharing)."""
    a, b = holders(("0",), per_gpu=2), holders(("0",), per_gpu=2)
    assert a.leased() == b.leased() == ("0",)
    c = holders(("0",), per_gpu=2)
    assert c.next("leased", timeout=0.6) is None
    assert "2 shards per GPU" in " ".join(c.logs)
    for holder in (a, b, c):
        holder.stop()
    d, e = holders(("0", "1"), per_gpu=2), holders(("0", "1"), per_gpu=2)
    assert {d.leased(), e.leased()} == {("0",), ("1",)}


def test_waiting_past_gpu_wait_s_fails_naming_the_step_and_the_holder(holders):
    a = holders(("7",))
    a.leased()
    before = os.environ.get(VISIBLE)
    with pytest.raises(StepFailure, match=r"step 'S'.*no GPU free.*GPU 7 by pid \d+: holder"):
        with gpu_lease(1, label=LABEL, owner="t", log=print, wait_s=0.3, pool=("7",)):
            pass
    with pytest.raises(StepFailure, match="asks for 2 GPUs per shard.*leases 1"):
        with gpu_lease(2, label=LABEL, owner="t", log=print, pool=("7",)):
            pass
    assert os.environ.get(VISIBLE) == before


@pytest.mark.xdist_group("heavy_or_timed")  # a 0.5 s bound: never beside the soak
def test_no_gpu_means_no_lease_no_wait_and_the_cpu(monkeypatch):
    """No GPU (none given, or NVML finds none): no lease, CUDA_VISIBLE_DEVICES untouched; a
    ``device: cpu`` step or ``gpus: 0`` leases nothing either."""
    from dagster_graphbook.execution.device import resolve_device

    monkeypatch.setenv(GPU_IDS_ENV, "")
    monkeypatch.delenv(VISIBLE, raising=False)
    assert gpu_pool() == ()
    logs: list = []
    start = time.monotonic()
    with gpu_lease(1, label=LABEL, owner="t", log=logs.append) as lease:
        assert lease.ids == () and lease.stats == {} and VISIBLE not in os.environ
    assert time.monotonic() - start < 0.5
    assert "no GPU on this machine" in logs[0] and "step 'S'" in logs[0]
    assert gpus_wanted("cpu", 2) == 0 and gpus_wanted("auto", 0) == 0
    assert gpus_wanted(" CUDA ", None) == 1 and gpus_wanted("auto", 2) == 2
    with gpu_lease(0, label=LABEL, owner="t", log=logs.append, pool=("0",)) as lease:
        assert lease.ids == () and "CPU" in lease.reason
    monkeypatch.setenv(GPU_IDS_ENV, "2, 3,-1,4")
    assert gpu_pool() == ("2", "3")  # CUDA stops at the first invalid id
    if nvml_gpu_count() == 0:  # this machine: a CUDA_VISIBLE_DEVICES names no real GPU
        monkeypatch.delenv(GPU_IDS_ENV)
        monkeypatch.setenv(VISIBLE, "0,1")
        assert gpu_pool() == ()
        assert resolve_device("auto") == "cpu"


def test_a_device_index_past_the_lease_is_refused_and_settings_are_checked():
    check_device("cuda:0", Lease(("3",)), LABEL)
    check_device("cuda:5", Lease(), LABEL)  # no lease: the device setting is the user's
    with pytest.raises(StepFailure, match=r"step 'S'.*'cuda:1'.*leased 1 GPU\(s\) \(physical 3\)"):
        check_device("cuda:1", Lease(("3",)), LABEL)
    with pytest.raises(ValueError, match="shards_per_gpu must be 1 or more"):
        BatchRuntime(shards_per_gpu=0)


# ---------------------------------------------------------------------------------------------
# A real sharded run on the multiprocess executor


def test_each_shard_process_gets_its_own_gpu(tmp_path, dagster_home):
    """12 notes in 2 shards on the multiprocess executor, 2 GPUs given: each shard process saw
    one GPU of its own, the event log says which, the commit's details record both.

    The run is started from a fresh interpreter holding the GPU ids in its environment: the
    executor's forkserver, once started by an earlier run of this process, keeps the
    environment it started with (step processes fork from it)."""
    nodes = copy_nodes(tmp_path / "nodes", "where_nodes.py", "gpu_leases")
    wf = write_workflow(
        tmp_path,
        "leases",
        [
            step_node("0", "Numbers", source=True),
            step_node("1", "WhereAmI"),
            resource_node("2", "WhereBuilt"),
        ],
        [edge("0", "out", "1"), edge("2", "resource", "1", "built")],
    )
    marks = tmp_path / "marks"
    marks.mkdir()
    params = {"WhereAmI.marks": str(marks), "WhereAmI.runtime.num_workers": 0}
    script = (
        "import json, sys\n"
        "from dagster_graphbook import run_workflow\n"
        f"run = run_workflow({str(wf)!r}, custom_nodes=[{str(nodes)!r}], params={params!r}, "
        f"dagster_home={dagster_home!r}, shards={{'WhereAmI': 2}}, executor='multiprocess')\n"
        "notes = run.notes.get('WhereAmI', {}).get('out', []) if run.success else []\n"
        "json.dump({'run_id': run.run_id, 'failure': run.failure, 'notes': notes}, sys.stdout)\n"
    )
    env = {**os.environ, GPU_IDS_ENV: "0,1", LEASE_DIR_ENV: str(tmp_path / "leases")}
    env.pop(VISIBLE, None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    assert run["failure"] is None, run["failure"]
    notes = run["notes"]
    assert [n["i"] for n in notes] == list(range(12))
    seen = {n["pid"]: n["visible"] for n in notes}
    assert len(seen) == 2 and os.getpid() not in seen, seen
    assert sorted(seen.values()) == ["0", "1"], seen
    # each shard's resource was built under its lease (the device check's H200 found resources
    # built before it: a model loaded onto cuda had started CUDA on every GPU of the process)
    assert {n["pid"]: n["built"] for n in notes} == seen
    assert {n["device"] for n in notes} == {"cpu"}  # the ids were given: torch sees no GPU
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        messages = [e.user_message for e in instance.all_logs(run["run_id"])]
        [materialization] = [
            e.asset_materialization
            for e in instance.all_logs(
                run["run_id"], of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            )
            if "WhereAmI" in e.asset_materialization.asset_key.to_user_string()
        ]
    leased = [m for m in messages if "leased GPU" in m]
    assert len(leased) == 2 and all("step 'WhereAmI'" in m for m in leased), leased
    details = materialization.metadata["details"].value
    assert sorted(details["gpus_leased"]) == ["0", "1"], details


def test_a_shard_leases_the_gpus_its_step_requests(tmp_path):
    """``gpus={STEP: N}`` (the op tags' request) is what each shard of the step leases."""
    from dagster_graphbook import GraphbookWorkflow
    from dagster_graphbook.defs.definitions import load
    from dagster_graphbook.plan.plan import compile_workflow
    from dagster_graphbook.plan.translator import GraphbookTranslator

    nodes = copy_nodes(tmp_path / "nodes", "where_nodes.py", "gpu_leases")
    wf = write_workflow(
        tmp_path,
        "leases",
        [step_node("0", "Numbers", source=True), step_node("1", "WhereAmI")],
        [edge("0", "out", "1")],
    )
    shards = {"shards": {"WhereAmI": 2}, "custom_nodes": [str(nodes)]}
    for gpus, wanted in ((None, 1), ({"WhereAmI": 2}, 2), (0, 0)):
        workflow = load(GraphbookWorkflow(wf, gpus=gpus, **shards))
        plan = compile_workflow(workflow, GraphbookTranslator())
        [shard] = [op.shard for op in plan.ops if op.shard is not None]
        assert gpus_wanted("auto", shard.gpus) == wanted, gpus


def test_a_read_only_lease_folder_runs_the_shard_unleased_saying_so(tmp_path, monkeypatch):
    """A lease folder that cannot be written (a read-only mount; as a user, no write permission)
    failed the shard with an OSError. The shard runs unleased with a warning naming the folder;
    a GPU whose lock it took before the failure is released; once writable, leases work again."""
    if not can_make_read_only(tmp_path):
        pytest.skip("root here may not mount (no CAP_SYS_ADMIN)")
    folder = tmp_path / "leases"
    monkeypatch.setenv(LEASE_DIR_ENV, str(folder))
    monkeypatch.delenv(VISIBLE, raising=False)
    folder.mkdir()
    (folder / "gpu-0.0").write_text("")  # GPU 0's lock file exists, GPU 1's cannot be made
    warned: list = []
    with read_only_switch(folder) as (freeze, thaw):
        freeze()
        with gpu_lease(
            2, label=LABEL, owner="shard", log=lambda m: None, warn=warned.append, pool=("0", "1")
        ) as lease:
            assert lease.ids == () and VISIBLE not in os.environ
        thaw()
        assert len(warned) == 1 and "no GPU lease" in warned[0], warned
        assert "may share a GPU" in warned[0] and str(folder) in warned[0], warned
        with gpu_lease(2, label=LABEL, owner="next", log=lambda m: None, pool=("0", "1")) as lease:
            assert lease.ids == ("0", "1")  # GPU 0 was not left locked
