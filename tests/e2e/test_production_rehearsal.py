"""A production rehearsal on one machine (marker ``rehearsal``), every part real and on
127.0.0.1: PostgreSQL as the instance's run, event-log and schedule storage (dagster-postgres);
moto's S3 server holding the days' images, the notes and the outputs; a Ray cluster of two
nodes, each advertising one (logical) GPU; ``dagster-daemon`` and ``dagster-webserver`` on that
instance. The nightly demo with ``ClassifyShapes`` in 4 shards on dagster-graphbook's Ray
executor: a 3-day backfill launched through the webserver's GraphQL and run by the daemon, the
worker node killed (SIGKILL, all its processes) while a shard runs there, PostgreSQL crashed and
restarted before one more run. Parts: tests/e2e/production_parts.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Tuple

import dagster as dg
import pandas as pd
import psutil
import pytest

from tests.conftest import Bucket, _shapes_data, moto_server, s3_env, serve_webserver
from tests.e2e import production_parts as parts

pytestmark = [pytest.mark.rehearsal, pytest.mark.xdist_group("rehearsal")]

DAYS = ("2026-04-01", "2026-04-02", "2026-04-03")
IMAGES = 8  # a day: 4 shards of 2 images
SHARDS = 4
KEEP = 1  # notes_keep: the last run of day 1 prunes the first one's versions
SHARD_OP = "nightly_shapes__ClassifyShapes.nightly_shapes__ClassifyShapes__shard"

LAUNCH_BACKFILL = """
mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
  __typename
  ... on LaunchBackfillSuccess { backfillId }
  ... on PythonError { message }
} }"""

BACKFILL = """
query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill {
  status
  runs(limit: 10) { runId status tags { key value } }
} } }"""


def _require_parts() -> None:
    """Skip, saying why, where a part cannot run here."""
    pytest.importorskip("dagster_postgres", reason="needs dagster-postgres (the postgres extra)")
    pytest.importorskip("psycopg2", reason="needs psycopg2 (dagster-postgres brings it)")
    pytest.importorskip("dagster_ray", reason="needs dagster-ray (the distributed extra)")
    pytest.importorskip("ray.dashboard", reason="needs ray[default] (the distributed extra)")
    try:
        parts.postgres_bin()
    except parts.PartUnavailable as exc:
        pytest.skip(str(exc))


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
        self.spec = parts.nightly_spec(str(workflow), str(root / "notes"), notes_keep=KEEP)
        self.wdefs = build_workflow(self.spec)
        self.job = parts.nightly_definitions(
            str(workflow), str(root / "notes"), notes_keep=KEEP
        ).resolve_job_def(parts.JOB)
        (root / "home").mkdir()
        self.instance = dg.DagsterInstance.from_config(str(root / "home"))
        self.run_ids: List[str] = []

    def run(self, day: str) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, bytes]]:
        """Day ``day``: its notes, sink tables and output files (relative path -> bytes)."""
        from dagster_graphbook.plan.translator import GraphbookTranslator
        from dagster_graphbook.runner.run import _load_notes

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


# a read of each storage the webserver holds a pooled connection to: runs, event log, and
# schedules/daemon heartbeats
PROBE = """
query($id: ID!) {
  runOrError(runId: $id) { ... on Run { status } }
  logsForRun(runId: $id, limit: 1) { ... on EventConnection { cursor } }
  instance { daemonHealth { allDaemonStatuses { daemonType healthy } } }
}"""


def _until_the_webserver_reconnects(url: str, run_id: str, tries: int = 10) -> int:
    """Read each storage through the webserver until none fails; the failed reads.

    dagster-webserver holds one pooled connection per storage without SQLAlchemy's pre-ping
    (dagster-postgres's ``optimize_for_webserver``): after Postgres restarts, the first
    request on each fails ("server closed the connection unexpectedly") and drops it
    (dagster-io/dagster#3812, #33879). A mutation meeting one can half-happen (a run row
    without its enqueued event, never launched), so reads go first."""
    import requests

    for attempt in range(tries):
        body = requests.post(
            f"{url}/graphql", json={"query": PROBE, "variables": {"id": run_id}}, timeout=60
        ).json()
        data = body.get("data") or {}
        if "errors" not in body and all(data.get(k) for k in ("runOrError", "logsForRun")):
            return attempt
    raise AssertionError(f"the webserver still fails after {tries} reads: {body}")


def test_nightly_backfill_on_postgres_a_bucket_and_two_ray_nodes_survives_a_node_and_a_db_crash(
    project, tmp_path, monkeypatch
):
    _require_parts()
    began = time.monotonic()
    token = uuid.uuid4().hex
    monkeypatch.setenv("GRAPHBOOK_REHEARSAL", token)
    checkpoint = str(project["root"] / "models" / "shapes_cnn.pt")
    # the same days on one box, local storage: what each rehearsal day must give
    local_root = tmp_path / "local"
    for day in DAYS:
        _shapes_data().make_day(local_root / "incoming", day, IMAGES)
    one_box = _OneBox(local_root, checkpoint)
    local = {day: one_box.run(day) for day in DAYS}
    local_again = one_box.run(DAYS[0])
    local_notes_files = sorted(
        str(p.relative_to(local_root / "notes"))
        for p in (local_root / "notes").rglob("*")
        if p.is_file()
    )
    local_run_ids = list(one_box.run_ids)
    one_box.instance.dispose()

    started = time.monotonic()
    # the parts' TMPDIR, where files bound for the bucket are staged; short: the processes
    # make sockets in it (a forkserver's: 107 characters at most)
    tmp = Path(tempfile.mkdtemp(prefix="gbtmp"))
    home = tmp_path / "home"
    home.mkdir()
    part_temps: List[str] = [str(tmp)]
    with contextlib.ExitStack() as stack:
        import s3fs

        stack.callback(shutil.rmtree, tmp, ignore_errors=True)

        endpoint = stack.enter_context(moto_server())
        s3_env(monkeypatch, endpoint)
        name = f"rehearsal-{token[:12]}"
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir(name)
        bucket = Bucket(name, endpoint, fs)
        for day in DAYS:
            for image in (local_root / "incoming" / day).iterdir():
                fs.put_file(str(image), f"{name}/incoming/{day}/{image.name}")
        inputs = set(bucket.objects())

        pg = stack.enter_context(parts.postgres_cluster())
        part_temps.append(str(pg.folder))
        (home / "dagster.yaml").write_text(
            parts.postgres_instance_yaml(pg.url, max_concurrent_runs=1)
        )
        aws = {k: os.environ[k] for k in os.environ if k.startswith("AWS_")}
        env = {**aws, "TMPDIR": str(tmp)}
        # the head notices a dead node after 3 missed 1 s health checks (Ray: 5 of 3 s)
        head_env = {
            **env,
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
        }
        head = stack.enter_context(parts.ray_node(1, env=head_env))
        nodes = _ShardNodes(head)
        nodes.name(head.node_id, "head")
        worker = stack.enter_context(parts.ray_node(1, head=head, env=env))
        nodes.name(worker.node_id, "worker")
        part_temps += [head.temp, worker.temp]
        assert head.dashboard is not None

        bucket_root = f"s3://{name}"
        code = tmp_path / "code"
        workflow = parts.nightly_workflow(code, bucket_root, checkpoint, IMAGES // SHARDS)
        workspace = parts.write_code_location(
            code,
            workflow=str(workflow),
            notes_dir=f"{bucket_root}/notes",
            ray_address=head.dashboard,
            env_vars=[f"{k}={v}" for k, v in env.items()],
            notes_keep=KEEP,
        )
        # the run workers look for ended steps every 0.2 s (Dagster: 1 s)
        daemon_env = {**env, "DAGSTER_STEP_DELEGATING_EXECUTOR_SLEEP_SECONDS": "0.2"}
        daemon = stack.enter_context(parts.dagster_daemon(workspace, home, env=daemon_env))
        web = stack.enter_context(serve_webserver(workspace, home, instance_yaml=None, env=env))
        ready = time.monotonic()

        # 1. a 3-day backfill through the webserver's GraphQL, run by the daemon
        launched = web.graphql(
            LAUNCH_BACKFILL,
            {
                "p": {
                    "selector": {
                        "partitionSetName": f"{parts.JOB}_partition_set",
                        "repositorySelector": {
                            "repositoryLocationName": "graphbook",
                            "repositoryName": "__repository__",
                        },
                    },
                    "partitionNames": list(DAYS),
                }
            },
        )["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        backfill_id = launched["backfillId"]
        launched_at, launched_wall = time.monotonic(), time.time()

        # 3. the worker node killed (all its processes, SIGKILL) while a shard's job runs there
        killed: Dict[str, Any] = {}
        deadline = time.monotonic() + 400
        while not killed:
            assert time.monotonic() < deadline, f"no shard ran on the worker: {nodes.jobs()}"
            assert daemon.poll() is None, (home / "daemon.log").read_text()[-3000:]
            for (run_id, step), jobs in nodes.jobs().items():
                running = [j for j in jobs if j[1] == "worker" and j[2] == "RUNNING"]
                if SHARD_OP in step and running:
                    killed = {"run": run_id, "step": step, "job": running[0][0]}
                    killed["groups"] = worker.kill()
                    break
            else:
                time.sleep(0.3)
        assert parts.group_pids(killed["groups"]) == []
        deadline = time.monotonic() + 120  # a new node for the next runs, once the head
        while worker.node_id in parts.alive_nodes(head):  # counts the dead one out
            assert time.monotonic() < deadline, "the head never saw the worker node die"
            time.sleep(0.5)
        worker2 = stack.enter_context(parts.ray_node(1, head=head, env=env))
        part_temps.append(worker2.temp)
        nodes.name(worker2.node_id, "worker-2")

        deadline = time.monotonic() + 600
        while True:  # the backfill's runs ended (the daemon marks it done in its next loop)
            backfill = web.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
            ended = [
                r for r in backfill["runs"] if r["status"] in ("SUCCESS", "FAILURE", "CANCELED")
            ]
            if len(ended) == len(DAYS):
                break
            assert time.monotonic() < deadline, backfill
            assert daemon.poll() is None, (home / "daemon.log").read_text()[-3000:]
            time.sleep(1)
        backfill_done = time.monotonic()
        runs = {
            {t["key"]: t["value"] for t in r["tags"]}["dagster/partition"]: r
            for r in backfill["runs"]
        }
        assert sorted(runs) == list(DAYS)
        assert {day: r["status"] for day, r in runs.items()} == dict.fromkeys(DAYS, "SUCCESS")
        run_ids = [runs[day]["runId"] for day in DAYS]

        # 2. which node ran which shard (Ray's job info: the node of its driver)
        jobs = nodes.jobs()
        print("\nshard -> [(Ray job, node, status)] by day:")
        for day, run_id in zip(DAYS, run_ids):
            for (rid, step), where in sorted(jobs.items()):
                if rid == run_id and SHARD_OP in step:
                    print(f"  {day} {step.rsplit('__', 1)[1]}: {where}")
        shard_jobs = {k: v for k, v in jobs.items() if SHARD_OP in k[1] and k[0] in run_ids}
        assert len(shard_jobs) == SHARDS * len(DAYS)
        ran = {
            (k[0], where) for k, v in shard_jobs.items() for _, where, s in v if s == "SUCCEEDED"
        }
        # runs whose shards succeeded on both nodes (the new worker's: the first one's shard
        # was killed)
        assert [r for r in run_ids if {(r, "head"), (r, "worker-2")} <= ran], jobs
        # the killed shard: its Ray job failed with the node, the retry's job succeeded
        attempts = jobs[(killed["run"], killed["step"])]
        assert [(j, w) for j, w, _ in attempts][0] == (killed["job"], "worker"), attempts
        assert [s for *_, s in attempts] == ["FAILED", "SUCCEEDED"], attempts
        assert attempts[1][0] == f"{killed['job']}-1"
        with dg.DagsterInstance.from_config(str(home)) as instance:
            retried = instance.get_records_for_run(
                killed["run"], of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY
            ).records
            starts = instance.get_records_for_run(
                run_ids[0], of_type=dg.DagsterEventType.STEP_START
            ).records
        assert [r.event_log_entry.step_key for r in retried] == [killed["step"]]
        first_shard_s = (
            min(
                r.event_log_entry.timestamp
                for r in starts
                if SHARD_OP in r.event_log_entry.step_key
            )
            - launched_wall
        )

        # 4. Postgres crashed (stop -m immediate: WAL recovery at start) and started between
        # two runs: nothing lost, and the next run, launched through the webserver and
        # dequeued by the daemon, succeeds
        before = _instance_state(home, run_ids)
        pg.stop("immediate")
        pg.start()
        assert _instance_state(home, run_ids) == before
        stale = _until_the_webserver_reconnects(web.url, run_ids[0])
        again = web.launch(parts.JOB, {}, tags={"dagster/partition": DAYS[0]})
        web.expect_success(again, timeout_s=400)
        deadline = time.monotonic() + 120  # the daemon's backfill loop runs every 30 s
        while (
            web.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]["status"]
            != "COMPLETED_SUCCESS"
        ):
            assert time.monotonic() < deadline, "the backfill was never marked completed"
            time.sleep(1)
        assert daemon.poll() is None
        fourth_done = time.monotonic()

        # 5. each day's notes, tables and files as on one box with local storage
        from dagster_graphbook.defs.definitions import build_workflow
        from dagster_graphbook.plan.translator import GraphbookTranslator
        from dagster_graphbook.runner.run import _load_notes

        spec = parts.nightly_spec(str(workflow), f"{bucket_root}/notes", notes_keep=KEEP)
        wdefs = build_workflow(spec)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            # day 1's first run: its notes were pruned by the 4th run (KEEP); the 4th's
            notes = _load_notes(again, wdefs, GraphbookTranslator(), instance)
            assert _localized(notes, bucket_root, str(local_root)) == local_again[0]
            tables = _tables(instance, again)
            assert _localized(tables, bucket_root, str(local_root)) == local_again[1]
            for day, run_id in zip(DAYS[1:], run_ids[1:]):
                notes = _load_notes(run_id, wdefs, GraphbookTranslator(), instance)
                assert _localized(notes, bucket_root, str(local_root)) == local[day][0], day
                assert (
                    _localized(_tables(instance, run_id), bucket_root, str(local_root))
                    == (local[day][1])
                ), day
        objects = bucket.objects()
        for day in DAYS:
            files = {
                k[len(f"outputs/{day}/") :]: fs.cat_file(f"{name}/{k}")
                for k in objects
                if k.startswith(f"outputs/{day}/")
            }
            assert files == local[day][2] and files, day

        # 7. the bucket holds what retention keeps, as the local notes folder does: the same
        # objects, run by run (the one-box runs in the same order), no temporaries
        order = dict(zip(run_ids + [again], ("r1", "r2", "r3", "r4")))
        local_order = dict(zip(local_run_ids, ("r1", "r2", "r3", "r4")))

        def by_run(key: str, ids: Dict[str, str]) -> str:
            for run_id, label in ids.items():
                key = key.replace(run_id, label)
            return key

        stored = sorted(
            by_run(k[len("notes/") :], order) for k in objects if k.startswith("notes/")
        )
        assert stored == sorted(by_run(k, local_order) for k in local_notes_files)
        assert set(objects) - inputs == {k for k in objects if k.startswith(("notes/", "outputs/"))}
        assert not [k for k in objects if "/.tmp-" in k or k.split("/")[-1].startswith(".tmp-")]

        # 6. nothing of the notes on local disk: not in the instance's folder, the Ray nodes'
        # and Postgres's folders, nor the staging folder of files bound for the bucket
        for folder in [home, *part_temps]:
            written = [p for p in Path(folder).rglob("*") if p.suffix in (".pkl", ".parquet")]
            assert written == [], written
        done = time.monotonic()

    # 7. no process of the rehearsal left, and no folder of its parts
    assert _rehearsal_processes(token) == []
    assert [t for t in part_temps if os.path.exists(t)] == []
    print(
        f"\nrehearsal: one-box days {started - began:.0f} s, parts up {ready - started:.0f} s, "
        f"backfill {backfill_done - launched_at:.0f} s (launch to first shard start "
        f"{first_shard_s:.0f} s), Postgres crash + 4th run "
        f"{fourth_done - backfill_done:.0f} s ({stale} failed reads before the webserver "
        "reconnected), checks {done - fourth_done:.0f} s, parts stopped "
        f"in {time.monotonic() - done:.0f} s; total {time.monotonic() - began:.0f} s"
    )
