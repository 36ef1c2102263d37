"""A production rehearsal on one machine (marker ``rehearsal``), every part real and on
127.0.0.1: PostgreSQL as the instance's run, event-log and schedule storage (dagster-postgres);
moto's S3 server holding the days' images, the notes and the outputs; a Ray cluster of two
nodes, each advertising one (logical) GPU; ``dagster-daemon`` and ``dagster-webserver`` on that
instance. The nightly demo with ``ClassifyShapes`` in 2 shards (one per GPU node) on
dagster-graphbook's Ray executor: a 2-day backfill launched through the webserver's GraphQL and
run by the daemon, the worker node killed (SIGKILL, all its processes) while a shard runs there,
PostgreSQL crashed and restarted before one more run. Parts: tests/e2e/production_parts.py."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set, Tuple

import dagster as dg
import pandas as pd
import psutil
import pytest

from tests.conftest import Bucket, _shapes_data, moto_server, s3_env, serve_webserver
from tests.e2e import production_parts as parts

# one group: its parts are started once, on one worker; 3 runs on Ray take 3-5 minutes on a
# loaded 2-core machine (the suite's timeout is 600 s)
pytestmark = [
    pytest.mark.rehearsal,
    pytest.mark.xdist_group("rehearsal"),
    pytest.mark.timeout(900),
]

# two days: the first run's worker node is killed, the second's shards run on the head and the
# node that replaced it, and day 1 run again prunes its first run's notes (KEEP); a third day
# showed nothing the second does not (and cost a run of 4 Ray jobs, ~30 s)
DAYS = ("2026-04-01", "2026-04-02")
# the docs' code location asks for 4 shards a day; a user of two one-GPU nodes asks for 2 (one
# at a time on each node), as this test does: 2 Ray jobs a run fewer, and shards still meet the
# worker's kill, the new worker and the head (_check_shards)
IMAGES = 4  # a day: 2 shards of 2 images
SHARDS = 2
KEEP = 1  # notes_keep: the last run of day 1 prunes the first one's versions

# skip, saying why, where a part cannot run here (before the session's checkpoint is trained)
pytest.importorskip("dagster_postgres", reason="needs dagster-postgres (the postgres extra)")
pytest.importorskip("psycopg2", reason="needs psycopg2 (dagster-postgres brings it)")
pytest.importorskip("dagster_ray", reason="needs dagster-ray (the distributed extra)")
pytest.importorskip("ray.dashboard", reason="needs ray[default] (the distributed extra)")
pytest.importorskip("moto.server", reason="needs moto[server] (the dev extra)")
pytest.importorskip("s3fs", reason="needs s3fs (the s3 extra)")
try:
    parts.postgres_bin()
except parts.PartUnavailable as exc:
    pytest.skip(str(exc), allow_module_level=True)

SHARD_OP = "nightly_shapes__ClassifyShapes.nightly_shapes__ClassifyShapes__shard"


def _localized(value: Any, bucket_root: str, local_root: str) -> Any:
    """``value`` with the bucket's URLs spelled as the local run's paths."""
    if isinstance(value, str):
        return value.replace(bucket_root, str(local_root))
    if isinstance(value, dict):
        return {k: _localized(v, bucket_root, str(local_root)) for k, v in value.items()}
    if isinstance(value, list):
        return [_localized(v, bucket_root, str(local_root)) for v in value]
    return value


def _tables(instance: dg.DagsterInstance, run_id: str) -> Dict[str, List[Dict[str, Any]]]:
    """The run's sink tables (asset -> rows), read from where its materializations say."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records
    tables = {}
    for record in records:
        m = record.asset_materialization
        assert m is not None
        if "table_path" in m.metadata:
            path = m.metadata["table_path"].value
            tables[m.asset_key.to_user_string()] = pd.read_parquet(path).to_dict("records")
    return tables


class _OneBox:
    """The same days on one box: the same code location's job in one process, local storage
    (a sqlite instance, notes in a local folder), shards run one after another."""

    def __init__(self, root: Path, checkpoint: str):
        from dagster_graphbook.defs.definitions import build_workflow

        self.root = root
        workflow = parts.nightly_workflow(root, str(root), checkpoint, IMAGES // SHARDS)
        self.spec = parts.nightly_spec(
            str(workflow), str(root / "notes"), shards=SHARDS, notes_keep=KEEP
        )
        self.wdefs = build_workflow(self.spec)
        self.job = parts.nightly_definitions(
            str(workflow), str(root / "notes"), shards=SHARDS, notes_keep=KEEP
        ).resolve_job_def(parts.JOB)
        (root / "home").mkdir()
        self.instance = dg.DagsterInstance.from_config(str(root / "home"))
        self.run_ids: List[str] = []

    def run(self, day: str) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, bytes]]:
        """Day ``day``: its notes, sink tables and output files (relative path -> bytes)."""
        from dagster_graphbook.plan.translator import GraphbookTranslator
        from dagster_graphbook.runner.results import load_notes as _load_notes

        result = self.job.execute_in_process(
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            instance=self.instance,
            partition_key=day,
            raise_on_error=False,
        )
        assert result.success, f"the one-box run of {day} failed"
        self.run_ids.append(result.run_id)
        notes = _load_notes(result.run_id, self.wdefs, GraphbookTranslator(), self.instance)
        out = self.root / "outputs" / day
        files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        return notes, _tables(self.instance, result.run_id), files


class _ShardNodes:
    """Which node ran each step's Ray job, read from the head's job server: (run id, step key)
    -> [(submission id, node, status)], ``node`` "head", "worker" (the first worker), or
    "worker-2" (the one started after it was killed)."""

    def __init__(self, head: parts.RayNode):
        from ray.job_submission import JobSubmissionClient

        self.client = JobSubmissionClient(head.dashboard)
        self.names: Dict[str, str] = {}

    def name(self, node_id: str, name: str) -> None:
        self.names[node_id] = name

    def jobs(self) -> Dict[Tuple[str, str], List[Tuple[str, str, str]]]:
        found: Dict[Tuple[str, str], List[Tuple[str, str, str]]] = {}
        for job in self.client.list_jobs():
            meta = job.metadata or {}
            if "dagster/op" not in meta:
                continue
            where = self.names.get(job.driver_node_id or "", job.driver_node_id or "not placed")
            found.setdefault((meta["dagster/run-id"], meta["dagster/op"]), []).append(
                (job.submission_id or "", where, str(job.status))
            )
        return {k: sorted(v) for k, v in found.items()}


def _rehearsal_processes(token: str) -> List[str]:
    """Processes other than this one whose environment carries the rehearsal's token: each
    part inherits it (Postgres through runuser and pg_ctl, Ray's workers and job drivers
    through their raylet, run workers through the daemon's code server)."""
    found = []
    me = os.getpid()
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            if f"GRAPHBOOK_REHEARSAL={token}".encode() in environ.split(b"\0"):
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(f"{pid} {' '.join(proc.cmdline())[:200]}")
        except (OSError, psutil.Error):
            continue
    return found


def _instance_state(home: Path, run_ids: List[str]) -> Dict[str, Any]:
    """What the instance holds of ``run_ids``: statuses, event counts by type, every
    materialization of each asset (run, partition, storage id)."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        state: Dict[str, Any] = {}
        for run_id in run_ids:
            run = instance.get_run_by_id(run_id)
            assert run is not None, run_id
            events = instance.all_logs(run_id)
            counts: Dict[str, int] = {}
            for e in events:
                kind = e.dagster_event.event_type_value if e.dagster_event else "log"
                counts[kind] = counts.get(kind, 0) + 1
            state[run_id] = (str(run.status), run.tags.get("dagster/partition"), counts)
        keys = instance.get_asset_keys()
        state["assets"] = sorted(k.to_user_string() for k in keys)
        for key in keys:
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key), limit=1000
            ).records
            state[key.to_user_string()] = sorted(
                (r.run_id, r.partition_key or "", r.storage_id) for r in records
            )
    return state


@dataclasses.dataclass
class _Parts:
    """The rehearsal's running parts."""

    bucket: Bucket
    pg: parts.Postgres
    head: parts.RayNode
    worker: parts.RayNode
    daemon: Any
    web: Any
    inputs: Set[str]  # the bucket's objects before the first run: the days' images
    backfill: str  # the backfill's id
    launched_wall: float  # when it was launched (time.time())
    home: Path
    env: Dict[str, str]  # what every part and step adds to its environment (AWS_*, TMPDIR)
    nodes: _ShardNodes
    temps: List[str]  # the parts' folders

    def alive(self) -> None:
        assert self.daemon.poll() is None, (self.home / "daemon.log").read_text()[-3000:]


@contextlib.contextmanager
def _started(
    tmp_path: Path, token: str, images: Path, checkpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[_Parts]:
    """The parts, on 127.0.0.1, stopped on exit: moto's S3 server with a bucket holding the
    days' ``images``; Postgres; a Ray head and a worker node (one logical GPU each); the code
    location (the nightly demo reading and writing the bucket, on Ray); the webserver and the
    daemon on the Postgres instance. The backfill of ``DAYS`` is launched through the webserver
    before the daemon starts: the daemon's backfill loop runs at its start and then every 30 s
    (Dagster's fixed interval), so a backfill launched once it runs waited up to 30 s idle."""
    import s3fs

    # the parts' TMPDIR, where files bound for the bucket are staged; short: the processes
    # make sockets in it (a forkserver's: 107 characters at most)
    tmp = Path(tempfile.mkdtemp(prefix="gbtmp"))
    home = tmp_path / "home"
    home.mkdir()
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        endpoint = stack.enter_context(moto_server())
        s3_env(monkeypatch, endpoint)
        name = f"rehearsal-{token[:12]}"
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir(name)
        for day in DAYS:
            for image in (images / day).iterdir():
                fs.put_file(str(image), f"{name}/incoming/{day}/{image.name}")
        bucket = Bucket(name, endpoint, fs)
        inputs = set(bucket.objects())  # before the backfill is launched, below

        pg = stack.enter_context(parts.postgres_cluster())
        # the docs' dagster.yaml, one run at a time (two cores); its DAGSTER_PG_* variables in
        # this process (the test reads the instance) and so in every part's environment
        (home / "dagster.yaml").write_text(
            parts.documented_instance_yaml(1, also=["dagster.yaml: no compute logs"])
        )
        for variable, value in pg.instance_env().items():
            monkeypatch.setenv(variable, value)
        env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "DAGSTER_PG_"))}
        env["TMPDIR"] = str(tmp)
        # the head notices a dead node after 3 missed 1 s health checks (Ray: 5 of 3 s)
        fast = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
        head = stack.enter_context(parts.ray_node(1, env={**env, **fast}))
        nodes = _ShardNodes(head)
        nodes.name(head.node_id, "head")
        worker = stack.enter_context(parts.ray_node(1, head=head, env=env))
        nodes.name(worker.node_id, "worker")
        assert head.dashboard is not None

        code = tmp_path / "code"
        workflow = parts.nightly_workflow(code, f"s3://{name}", checkpoint, IMAGES // SHARDS)
        workspace = parts.documented_code_location(
            code,
            workflow=str(workflow),
            bucket=name,
            ray_address=head.dashboard,
            notes_keep=KEEP,
            shards=SHARDS,
        )
        # the webserver as the docs start it: a fresh connection per use, so that a launch
        # right after Postgres restarts does not meet a dead pooled connection
        web_env = {**env, "DAGSTER_WEBSERVER_DB_POOL_RECYCLE": "0"}
        web = stack.enter_context(serve_webserver(workspace, home, None, env=web_env))
        # 1. a 2-day backfill through the webserver's GraphQL, run by the daemon
        launched_wall = time.time()
        backfill = parts.launch_backfill(web, DAYS)
        # the run workers look for ended steps every 0.2 s (Dagster: 1 s)
        daemon_env = {**env, "DAGSTER_STEP_DELEGATING_EXECUTOR_SLEEP_SECONDS": "0.2"}
        daemon = stack.enter_context(parts.dagster_daemon(workspace, home, env=daemon_env))
        yield _Parts(
            bucket=bucket,
            pg=pg,
            head=head,
            worker=worker,
            daemon=daemon,
            web=web,
            inputs=inputs,
            backfill=backfill,
            launched_wall=launched_wall,
            home=home,
            env=env,
            nodes=nodes,
            temps=[str(tmp), str(pg.folder), head.temp, worker.temp],
        )


def _kill_the_worker_mid_shard(p: _Parts, stack: contextlib.ExitStack) -> Dict[str, Any]:
    """SIGKILL the worker node (every process of it) once a shard's Ray job runs there; start
    a new worker node (``worker-2``) once the head counts the dead one out. The killed job's
    run, step and submission id."""
    deadline = time.monotonic() + 400
    while True:
        assert time.monotonic() < deadline, f"no shard ran on the worker: {p.nodes.jobs()}"
        p.alive()
        for (run_id, step), jobs in p.nodes.jobs().items():
            running = [j for j in jobs if j[1] == "worker" and j[2] == "RUNNING"]
            if SHARD_OP in step and running:
                groups = p.worker.kill()
                assert parts.group_pids(groups) == []
                killed = {"run": run_id, "step": step, "job": running[0][0]}
                deadline = time.monotonic() + 120
                while p.worker.node_id in parts.alive_nodes(p.head):
                    assert time.monotonic() < deadline, "the head never saw the worker die"
                    time.sleep(0.5)
                worker2 = stack.enter_context(parts.ray_node(1, head=p.head, env=p.env))
                p.temps.append(worker2.temp)
                p.nodes.name(worker2.node_id, "worker-2")
                return killed
        time.sleep(0.3)


def _check_shards(p: _Parts, run_ids: List[str], killed: Dict[str, Any]) -> None:
    """Shards ran on both nodes; the killed shard's Ray job failed with its node and its
    retry's job succeeded (Dagster's retry after the failed health check)."""
    jobs = p.nodes.jobs()
    print("\nshard -> [(Ray job, node, status)] by run:")
    for run_id in run_ids:
        for (rid, step), where in sorted(jobs.items()):
            if rid == run_id and SHARD_OP in step:
                print(f"  {run_id[:8]} {step.rsplit('__', 1)[1]}: {where}")
    shard_jobs = {k: v for k, v in jobs.items() if SHARD_OP in k[1] and k[0] in run_ids}
    assert len(shard_jobs) == SHARDS * len(run_ids)
    ran = {(k[0], where) for k, v in shard_jobs.items() for _, where, s in v if s == "SUCCEEDED"}
    # runs whose shards succeeded on both nodes (the new worker's: the first one's shard died)
    assert [r for r in run_ids if {(r, "head"), (r, "worker-2")} <= ran], jobs
    attempts = jobs[(killed["run"], killed["step"])]
    assert [(j, w) for j, w, _ in attempts][0] == (killed["job"], "worker"), attempts
    assert [s for *_, s in attempts] == ["FAILED", "SUCCEEDED"], attempts
    assert attempts[1][0] == f"{killed['job']}-1"
    with dg.DagsterInstance.from_config(str(p.home)) as instance:
        retried = instance.get_records_for_run(
            killed["run"], of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY
        ).records
    assert [r.event_log_entry.step_key for r in retried] == [killed["step"]]


def _first_shard_start(home: Path, run_id: str) -> float:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        starts = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_START)
    return min(
        r.event_log_entry.timestamp
        for r in starts.records
        if SHARD_OP in (r.event_log_entry.step_key or "")
    )


def _stored_by_run(keys: List[str], run_ids: List[str]) -> List[str]:
    """``keys`` with each run's id spelled as its place in ``run_ids`` (r1, r2, ...)."""
    out = []
    for key in keys:
        for n, run_id in enumerate(run_ids):
            key = key.replace(run_id, f"r{n + 1}")
        out.append(key)
    return sorted(out)


def test_nightly_backfill_on_postgres_a_bucket_and_two_ray_nodes_survives_a_node_and_a_db_crash(
    project, tmp_path, monkeypatch
):
    """The scenario of the module docstring; each day's notes, tables and files as the same
    day's on one box with local storage, nothing of them on local disk, the bucket holding
    what retention keeps, and no process of the rehearsal left afterwards."""
    from dagster_graphbook.defs.definitions import build_workflow
    from dagster_graphbook.plan.translator import GraphbookTranslator
    from dagster_graphbook.runner.results import load_notes as _load_notes

    began = time.monotonic()
    token = uuid.uuid4().hex  # in every part's environment (_rehearsal_processes)
    monkeypatch.setenv("GRAPHBOOK_REHEARSAL", token)
    checkpoint = str(project["root"] / "models" / "shapes_cnn.pt")
    # the days on one box with local storage (day 1 twice, as below): what each must give
    local_root = tmp_path / "local"
    for day in DAYS:
        _shapes_data().make_day(local_root / "incoming", day, IMAGES)
    one_box = _OneBox(local_root, checkpoint)
    local = {day: one_box.run(day) for day in DAYS}
    local_again = one_box.run(DAYS[0])
    local_notes = [
        str(f.relative_to(local_root / "notes"))
        for f in (local_root / "notes").rglob("*")
        if f.is_file()
    ]
    one_box.instance.dispose()

    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        p = stack.enter_context(
            _started(tmp_path, token, local_root / "incoming", checkpoint, monkeypatch)
        )
        ready = time.monotonic()
        inputs = p.inputs
        # 1. the backfill (launched as the parts started: ``_started``)
        launched_wall, backfill = p.launched_wall, p.backfill
        # 3. the worker node killed while a shard runs there
        killed = _kill_the_worker_mid_shard(p, stack)
        runs = parts.wait_backfill_runs(p.web, backfill, len(DAYS), 600, p.alive)
        backfill_s, backfill_done = time.time() - launched_wall, time.monotonic()
        assert [(r["partition"], r["status"]) for r in runs] == [(d, "SUCCESS") for d in DAYS]
        run_ids = [r["runId"] for r in runs]
        # 2. which node ran which shard (Ray's job info: the node of its driver)
        _check_shards(p, run_ids, killed)
        first_shard_s = _first_shard_start(p.home, run_ids[0]) - launched_wall

        # 4. Postgres crashed (stop -m immediate: WAL recovery at start) between two runs:
        # nothing lost; the next run, launched through the webserver and dequeued by the
        # daemon, succeeds
        before = _instance_state(p.home, run_ids)
        p.pg.stop("immediate")
        p.pg.start()
        assert _instance_state(p.home, run_ids) == before
        # at once, no read first: the docs' webserver (--db-pool-recycle 0) has no stale
        # connection to meet
        again = p.web.launch(parts.JOB, {}, tags={"dagster/partition": DAYS[0]})
        p.web.expect_success(again, timeout_s=400)
        deadline = time.monotonic() + 120  # the daemon's backfill loop runs every 30 s
        while parts.backfill(p.web, backfill)["status"] != "COMPLETED_SUCCESS":
            assert time.monotonic() < deadline, "the backfill was never marked completed"
            time.sleep(1)
        p.alive()
        last_done = time.monotonic()

        # 5. each day's notes, tables and files as on one box with local storage (day 1's
        # first run's notes were pruned by the 3rd run, KEEP: the 3rd's)
        root = p.bucket.url
        workflow = str(tmp_path / "code" / "nightly_shapes.json")
        wdefs = build_workflow(parts.nightly_spec(workflow, f"{root}/notes", shards=SHARDS))
        expected = {DAYS[0]: local_again, **{day: local[day] for day in DAYS[1:]}}
        with dg.DagsterInstance.from_config(str(p.home)) as instance:
            for day, run_id in zip(DAYS, [again, *run_ids[1:]]):
                notes = _load_notes(run_id, wdefs, GraphbookTranslator(), instance)
                assert _localized(notes, root, str(local_root)) == expected[day][0], day
                tables = _tables(instance, run_id)
                assert _localized(tables, root, str(local_root)) == expected[day][1], day
        objects = p.bucket.objects()
        for day in DAYS:
            files = {
                k[len(f"outputs/{day}/") :]: p.bucket.fs.cat_file(f"{p.bucket.name}/{k}")
                for k in objects
                if k.startswith(f"outputs/{day}/")
            }
            assert files == local[day][2] and files, day

        # 7. the bucket holds what retention keeps, as the local notes folder does after the
        # same runs: the same objects, run by run; nothing else, no temporaries
        stored = [k[len("notes/") :] for k in objects if k.startswith("notes/")]
        assert _stored_by_run(stored, [*run_ids, again]) == _stored_by_run(
            local_notes, one_box.run_ids
        )
        assert set(objects) - inputs == {k for k in objects if k.startswith(("notes/", "outputs/"))}
        assert not [k for k in objects if k.split("/")[-1].startswith(".tmp-")]

        # 6. nothing of the notes on local disk: not in the instance's folder, the Ray nodes'
        # and Postgres's folders, nor the staging folder of files bound for the bucket
        temps = list(p.temps)
        for folder in [p.home, *temps]:
            written = [f for f in Path(folder).rglob("*") if f.suffix in (".pkl", ".parquet")]
            assert written == [], written
            # nor the steps' compute logs: the docs' block turns them off (or puts them in a
            # bucket: dagster-aws, not a test dependency)
            logs = [f for f in Path(folder).rglob("compute_logs")]
            assert logs == [], logs
        done = time.monotonic()

    # 7. no process of the rehearsal left, and none of its parts' folders
    assert _rehearsal_processes(token) == []
    assert [t for t in temps if os.path.exists(t)] == []
    print(
        f"\nrehearsal: one-box days {started - began:.0f} s, parts up {ready - started:.0f} s, "
        f"backfill {backfill_s:.0f} s (launch to the first shard's start {first_shard_s:.0f} "
        f"s), Postgres crash + 3rd run {last_done - backfill_done:.0f} s, "
        f"checks {done - last_done:.0f} s, "
        f"parts stopped in {time.monotonic() - done:.0f} s; total {time.monotonic() - began:.0f} s"
    )
