"""The parts of a production deployment, started on 127.0.0.1 and stopped afterwards: a
PostgreSQL cluster of its own, Ray nodes (a head and workers joining it), ``dagster-daemon run``
(``dagster-webserver``: tests/conftest.py's ``serve_webserver``); the nightly demo's code
location for them, and a backfill through the webserver's GraphQL. Shared by the rehearsal
(tests/e2e/test_production_rehearsal.py), the Ray tests (tests/e2e/test_deploy_distributed.py)
and benchmarks/bench_deploy.py. Each part runs in process groups of its own; one that cannot
run here raises ``PartUnavailable`` naming why (a test turns that into a skip)."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import psutil

REPO = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent  # the venv's console scripts (ray, dagster-daemon)


class PartUnavailable(RuntimeError):
    """A part cannot run on this machine (a binary or package missing); says which."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(
    what: str,
    ready: Callable[[], bool],
    proc: Optional[subprocess.Popen],
    timeout_s: float,
    log: Optional[Path] = None,
) -> None:
    """Poll ``ready`` until true; fail naming ``what`` (with its log's tail) if ``proc`` exits or
    the time runs out."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc is not None and proc.poll() is not None:
            said = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} exited at start ({proc.returncode}):\n{said}")
        if time.monotonic() > deadline:
            said = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} not ready within {timeout_s:g} s:\n{said}")
        time.sleep(0.25)


def group_pids(pgids: List[int]) -> List[int]:
    """The processes still alive (not zombies) in any of the process groups ``pgids``."""
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) in pgids:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def kill_tree(pid: int) -> List[int]:
    """SIGKILL the process ``pid``, every process descended from it and every process group
    one of them leads or belongs to (Ray puts a job's driver in a session of its own): a host
    gone at once. Returns the process groups killed."""
    try:
        root = psutil.Process(pid)
        tree = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    pgids = set()
    for proc in tree:
        try:
            pgids.add(os.getpgid(proc.pid))
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 30
    while True:  # again while any lives: one forked meanwhile, one not yet gone
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.1)
        left = group_pids(sorted(pgids))
        if not left:
            return sorted(pgids)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {left} outlived SIGKILL to their groups")


def stop(proc: subprocess.Popen, first: int, grace_s: float) -> None:
    """Stop a part started in a process group of its own: ``first`` (a signal) to its group, up
    to ``grace_s`` for it to end, then SIGKILL to what it and its group left (``kill_tree``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, first)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    kill_tree(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# ---------------------------------------------------------------------------------------------
# PostgreSQL: a cluster of its own (Debian's postgresql package), on loopback


def postgres_bin() -> Path:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, else Debian's /usr/lib/postgresql/N/bin
    (the newest); raises ``PartUnavailable`` where neither is."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if versions:
        return Path(versions[-1]).parent
    raise PartUnavailable(
        "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin: "
        "install Debian's postgresql package (scripts/test.sh does as root)"
    )


@dataclasses.dataclass
class Postgres:
    """A running cluster on 127.0.0.1 (user ``postgres``, trust on loopback) with a database
    ``dagster``, the docs' ``db_name``; ``instance_env`` names it for the docs' dagster.yaml."""

    folder: Path
    port: int
    bin: Path
    as_user: List[str]  # ``runuser -u postgres --`` when root (postgres refuses to run as root)

    def instance_env(self) -> Dict[str, str]:
        """The variables the docs' dagster.yaml reads (``documented_instance_yaml``), for this
        cluster; trust authentication takes any password."""
        return {
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USER": "postgres",
            "DAGSTER_PG_PASSWORD": "unused-with-trust",
        }

    def create_database(self, name: str) -> None:
        import psycopg2

        conn = psycopg2.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres"
        )
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def pg_ctl(self, *args: str, timeout_s: float = 120) -> None:
        done = subprocess.run(
            [*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
        )
        if done.returncode != 0:
            log = self.folder / "postgres.log"
            raise RuntimeError(
                f"pg_ctl {' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}\n"
                + (log.read_text()[-2000:] if log.exists() else "")
            )

    def start(self) -> None:
        options = f"-k {self.folder / 'sock'} -p {self.port} -h 127.0.0.1"
        self.pg_ctl("start", "-w", "-l", str(self.folder / "postgres.log"), "-o", options)

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode``; ``immediate`` is a crash (WAL recovery at the next start)."""
        self.pg_ctl("stop", "-w", "-m", mode)

    def pid(self) -> Optional[int]:
        """The postmaster's pid while it runs."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


@contextlib.contextmanager
def postgres_cluster() -> Iterator[Postgres]:
    """``initdb`` a cluster into a new temporary folder and ``pg_ctl start`` it on a free port of
    127.0.0.1 (its socket in that folder); stopped and removed on exit. As root, run as the
    ``postgres`` user, which owns the folder."""
    bin = postgres_bin()
    as_user: List[str] = []
    folder = Path(tempfile.mkdtemp(prefix="gbpg"))  # under /tmp: the postgres user can reach it
    try:
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise PartUnavailable(
                    "running as root without runuser to start postgres as postgres"
                )
            try:
                import pwd

                owner = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PartUnavailable("root, and no postgres user to run the server as") from exc
            as_user = [runuser, "-u", "postgres", "--"]
            os.chown(folder, owner.pw_uid, owner.pw_gid)
        (folder / "sock").mkdir()
        if as_user:
            os.chown(folder / "sock", owner.pw_uid, owner.pw_gid)
        done = subprocess.run(
            [*as_user, str(bin / "initdb"), "-D", str(folder / "data"), "-U", "postgres"]
            + ["-A", "trust", "-E", "UTF8", "--no-sync"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr}")
        pg = Postgres(folder, free_port(), bin, as_user)
        pg.start()
        try:
            pg.create_database("dagster")
            yield pg
        finally:
            if pg.pid() is not None:
                with contextlib.suppress(Exception):
                    pg.stop("fast")
            pid = pg.pid()
            if pid is not None:  # did not stop: kill its processes (the postmaster's group)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def documented_instance_yaml(
    max_concurrent_runs: Optional[int] = None, also: Sequence[str] = ()
) -> str:
    """The ``dagster.yaml`` of docs/deploying.md ("A production deployment"), read from the
    page: run, event-log and schedule storage in Postgres named by the ``DAGSTER_PG_*``
    variables (``Postgres.instance_env``), the daemon's run queue; ``also`` the page's other
    blocks merged in (``"dagster.yaml: no compute logs"``). Telemetry off; with
    ``max_concurrent_runs``, that limit instead of the docs' one."""
    import yaml

    from tests.e2e.test_documented_examples import doc_section

    files, _ = doc_section("deploying.md", "## A production deployment")
    config = yaml.safe_load(files["dagster.yaml"])
    for block in also:
        config.update(yaml.safe_load(files[block]))
    config["telemetry"] = {"enabled": False}
    if max_concurrent_runs is not None:
        config["run_coordinator"]["config"]["max_concurrent_runs"] = max_concurrent_runs
    return yaml.safe_dump(config, sort_keys=False)


# ---------------------------------------------------------------------------------------------
# Ray: ``ray start --block`` nodes on 127.0.0.1, each in a process group of its own


@dataclasses.dataclass
class RayNode:
    """A started node: its ``ray start`` process, temporary folder and (head) addresses."""

    proc: subprocess.Popen
    temp: str
    head: bool
    gcs: str  # the head's GCS address (host:port), which a worker joins
    dashboard: Optional[str]  # the head's job server, http://127.0.0.1:PORT
    node_id: str = ""  # Ray's id of the node, once it is up

    def kill(self) -> List[int]:
        """SIGKILL the node and everything it started (``kill_tree``); the process groups."""
        pgids = kill_tree(self.proc.pid)
        self.proc.wait()
        return pgids


def ray_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of a node (and the step processes it starts)."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "RAY_USAGE_STATS_ENABLED": "0",
        # Ray 2.60 turns token auth on for a cluster when ~/.ray/auth_token exists (a local
        # `ray.init()` writes one): the readiness probes would then never get in
        "RAY_AUTH_MODE": "disabled",
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
        **(extra or {}),
    }  # a step's entrypoint is `dagster api ...`


def _require_ray() -> None:
    try:
        import dagster_ray  # noqa: F401
        import ray.dashboard  # noqa: F401
    except ImportError as exc:
        raise PartUnavailable(
            f"needs dagster-ray and ray[default] (the job server), the distributed extra: {exc}"
        ) from exc


@contextlib.contextmanager
def ray_node(
    gpus: int,
    head: Optional[RayNode] = None,
    cpus: int = 2,
    env: Optional[Dict[str, str]] = None,
    at: Optional[RayNode] = None,
) -> Iterator[RayNode]:
    """A Ray node with ``gpus`` logical GPUs (Ray schedules and hands out their ids, none is
    touched): the head (``head`` None; its job server ready to take jobs) or a worker joining
    ``head`` (once the head counts it alive). Each with a temporary folder and ports of its own,
    not Ray's defaults (two clusters at once, tests side by side, would share them); a head
    ``at`` a killed head takes its GCS and job server addresses (a head restarted). On exit the
    node's process group gets SIGTERM, then SIGKILL after a short grace (``ray start --block``
    takes 35-60 s to stop gracefully: a longer grace only waited, 5 s a node, before the same
    SIGKILL), and anything it left (``kill_tree``)."""
    _require_ray()
    temp = tempfile.mkdtemp(prefix="gbray")  # short: socket paths must fit in 107 characters
    ports = ["dashboard-agent-listen", "dashboard-agent-grpc", "runtime-env-agent"]
    ports += ["metrics-export", "node-manager", "object-manager"]
    cmd = [str(BIN / "ray"), "start", "--block", "--node-ip-address=127.0.0.1"]
    cmd += [f"--{name}-port={free_port()}" for name in ports]
    cmd += [f"--num-cpus={cpus}", f"--num-gpus={gpus}", f"--temp-dir={temp}"]
    dashboard = None
    if head is None:
        gcs = at.gcs if at is not None else f"127.0.0.1:{free_port()}"
        dashboard = at.dashboard if at is not None else f"http://127.0.0.1:{free_port()}"
        assert dashboard is not None
        dashboard_port = dashboard.rsplit(":", 1)[1]
        cmd += ["--head", f"--port={gcs.rsplit(':', 1)[1]}", "--dashboard-host=127.0.0.1"]
        cmd += [f"--dashboard-port={dashboard_port}", "--include-dashboard=true"]
        cmd += [f"--ray-client-server-port={free_port()}"]
    else:
        gcs = head.gcs
        cmd += [f"--address={gcs}"]
    log = Path(temp) / "ray-start.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, env=ray_env(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    node = RayNode(proc, temp, head is None, gcs, dashboard)
    try:
        before = set(alive_nodes(head)) if head is not None else set()
        if head is None:
            _wait_head(node, log)
        else:
            _wait(
                "the Ray worker node", lambda: bool(set(alive_nodes(head)) - before), proc, 120, log
            )
        (node.node_id,) = set(alive_nodes(head or node)) - before
        yield node
    finally:
        stop(proc, signal.SIGTERM, 1)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_head(node: RayNode, log: Path) -> None:
    import requests
    from ray.job_submission import JobSubmissionClient

    def answers() -> bool:
        try:
            return requests.get(f"{node.dashboard}/api/version", timeout=2).ok
        except requests.RequestException:
            return False

    _wait("the Ray head", answers, node.proc, 120, log)

    def takes_jobs() -> bool:  # its job agent takes jobs a while after the job server answers
        try:
            JobSubmissionClient(node.dashboard).submit_job(entrypoint="true")
            return True
        except RuntimeError:  # "No available agent to submit job, please try again later"
            return False

    _wait("the Ray head's job agent", takes_jobs, node.proc, 120, log)


def alive_nodes(head: RayNode) -> Dict[str, bool]:
    """The cluster's alive nodes as its head's state API lists them: node id -> is the head."""
    import requests

    try:
        rows = requests.get(f"{head.dashboard}/api/v0/nodes?detail=1", timeout=10).json()
    except (requests.RequestException, ValueError):
        return {}
    return {
        row["node_id"]: bool(row["is_head_node"])
        for row in rows["data"]["result"]["result"]
        if row["state"] == "ALIVE"
    }


# ---------------------------------------------------------------------------------------------
# dagster-daemon


@contextlib.contextmanager
def dagster_daemon(
    workspace: Path, home: Path, env: Optional[Dict[str, str]] = None
) -> Iterator[subprocess.Popen]:
    """``dagster-daemon run -w WORKSPACE`` on the instance in ``home`` (the run queue, backfills,
    schedules, sensors), from the repository root, in a process group of its own; once its
    heartbeat is in the instance. Stopped with SIGINT (then SIGKILL) on exit."""
    import dagster as dg

    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    log = home / "daemon.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
            cwd=REPO,
            env={**os.environ, **(env or {}), "DAGSTER_HOME": str(home), "PYTHONPATH": pythonpath},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:

            def beating() -> bool:
                return any(
                    hb.daemon_type == "QUEUED_RUN_COORDINATOR"
                    for hb in instance.get_daemon_heartbeats().values()
                )

            _wait("dagster-daemon", beating, proc, 180, log)
        yield proc
    finally:
        stop(proc, signal.SIGINT, 30)


# ---------------------------------------------------------------------------------------------
# The code location: the nightly demo, daily, ClassifyShapes sharded, its notes where asked

NIGHTLY_JSON = REPO / "workflows" / "nightly_shapes.json"
NIGHTLY_NODES = REPO / "custom_nodes" / "nightly"
JOB = "nightly_shapes"
PARTITIONS_START = "2026-01-01"


def nightly_workflow(folder: Path, root: str, checkpoint: str, batch_size: int) -> Path:
    """A copy of the nightly workflow in ``folder`` whose day's images are read from
    ``root/incoming/{partition_key}`` and resized copies written to ``root/outputs/...``
    (``root`` a local folder or a bucket's URL), ``ClassifyShapes`` in batches of
    ``batch_size``."""
    import json

    values = {
        "ShapesModel": {"checkpoint": checkpoint, "device": "cpu"},
        "IncomingImages": {"folder": f"{root}/incoming/{{partition_key}}"},
        "ClassifyShapes": {"batch_size": batch_size},
        "SaveResized": {"output_dir": f"{root}/outputs/{{partition_key}}"},
    }
    workflow = json.loads(NIGHTLY_JSON.read_text())
    for node in workflow["nodes"]:
        for name, value in values.get(node["data"]["name"], {}).items():
            node["data"]["parameters"][name]["value"] = value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nightly_shapes.json"
    path.write_text(json.dumps(workflow, indent=2))
    return path


def nightly_spec(
    workflow: str,
    notes_dir: str,
    *,
    shards: int = 4,
    ray_address: Optional[str] = None,
    env_vars: Sequence[str] = (),
    notes_keep: Optional[int] = None,
) -> Any:
    """The nightly demo (``workflow``, a ``nightly_workflow`` copy) as a daily-partitioned
    ``GraphbookWorkflow`` with ``ClassifyShapes`` in ``shards`` shards: on dagster-graphbook's
    Ray executor at ``ray_address`` (each shard asking for one GPU; ``env_vars`` given to each
    step's Ray job), else in one process."""
    from dagster_graphbook import GraphbookWorkflow, daily_partitions

    if ray_address is None:
        executor: Any = None  # graphbook_executor: in process, or multiprocess by run config
    else:
        from dagster_graphbook.integrations.ray import ray_executor

        env = [f"PYTHONPATH={REPO}", *env_vars]  # the step imports this module's package
        executor = ray_executor.configured({"ray": {"address": ray_address, "env_vars": env}})
    return GraphbookWorkflow(
        workflow,
        custom_nodes=[str(NIGHTLY_NODES)],
        partitions_def=daily_partitions(PARTITIONS_START),
        shards={"ClassifyShapes": shards},
        gpus={"ClassifyShapes": 1} if ray_address is not None else None,
        notes_dir=notes_dir,
        notes_keep=notes_keep,
        executor=executor,
    )


def nightly_definitions(workflow: str, notes_dir: str, **kwargs: Any) -> Any:
    """``Definitions`` of ``nightly_spec(workflow, notes_dir, **kwargs)``."""
    from dagster_graphbook import build_definitions

    return build_definitions([nightly_spec(workflow, notes_dir, **kwargs)])


def nightly_job(workflow: str, notes_dir: str, **kwargs: Any) -> Any:
    """The job of ``nightly_definitions(workflow, notes_dir, **kwargs)``, rebuilt in each step
    process (``dg.build_reconstructable_job``)."""
    return nightly_definitions(workflow, notes_dir, **kwargs).resolve_job_def(JOB)


def documented_code_location(
    folder: Path, *, workflow: str, bucket: str, ray_address: str, notes_keep: int, shards: int
) -> Path:
    """The code location of docs/deploying.md ("A production deployment", ``# definitions.py``),
    read from the page, with this deployment's names put in as its user would: the head's
    address, the bucket, the workflow file and node folder, ``notes_keep``, the shards a day (one
    per GPU node of the cluster); and a workspace.yaml
    (location ``graphbook``) loading it. The workspace's path."""
    from tests.e2e.test_documented_examples import doc_section

    files, _ = doc_section("deploying.md", "## A production deployment")
    text = files["definitions.py"]
    names = {
        '"http://ray-head:8265"': repr(ray_address),
        '"s3://bucket/notes"': repr(f"s3://{bucket}/notes"),
        '"workflows/nightly_shapes.json"': repr(workflow),
        '"custom_nodes/nightly"': repr(str(NIGHTLY_NODES)),
        "notes_keep=3": f"notes_keep={notes_keep}",
        '{"ClassifyShapes": 4},  # 4 shards': f'{{"ClassifyShapes": {shards}}},  # {shards} shards',
    }
    for old, new in names.items():
        assert old in text, f"docs/deploying.md's code location no longer says {old}"
        text = text.replace(old, new)
    (folder / "definitions.py").write_text(text)
    workspace = folder / "workspace.yaml"
    workspace.write_text(
        "load_from:\n"
        "  - python_file:\n"
        f"      relative_path: {folder / 'definitions.py'}\n"
        "      location_name: graphbook\n"
        f"      working_directory: {folder}\n"
    )
    return workspace


def write_code_location(folder: Path, **kwargs: Any) -> Path:
    """A workspace.yaml (location ``graphbook``) and the definitions file it loads into
    ``folder``: ``nightly_definitions(**kwargs)``, written out as literals (the daemon's and
    the webserver's code servers and every step's process load the file). The workspace's
    path."""
    (folder / "rehearsal_defs.py").write_text(
        "from tests.e2e.production_parts import nightly_definitions\n\n"
        f"defs = nightly_definitions(**{kwargs!r})\n"
    )
    workspace = folder / "workspace.yaml"
    workspace.write_text(
        "load_from:\n"
        "  - python_file:\n"
        f"      relative_path: {folder / 'rehearsal_defs.py'}\n"
        "      location_name: graphbook\n"
        f"      working_directory: {REPO}\n"
    )
    return workspace


# ---------------------------------------------------------------------------------------------
# A backfill of the job's days through the webserver's GraphQL (the UI's "Launch backfill")

LAUNCH_BACKFILL = """
mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
  __typename
  ... on LaunchBackfillSuccess { backfillId }
  ... on PythonError { message }
} }"""

BACKFILL = """
query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill {
  status
  runs(limit: 100) { runId status tags { key value } }
} } }"""


def launch_backfill(web: Any, days: Sequence[str]) -> str:
    """``launchPartitionBackfill`` of the job's partition set (location ``graphbook``) for
    ``days`` through ``web`` (tests/conftest.py's ``Webserver``); the backfill's id."""
    launched = web.graphql(
        LAUNCH_BACKFILL,
        {
            "p": {
                "selector": {
                    "partitionSetName": f"{JOB}_partition_set",
                    "repositorySelector": {
                        "repositoryLocationName": "graphbook",
                        "repositoryName": "__repository__",
                    },
                },
                "partitionNames": list(days),
            }
        },
    )["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"]


def backfill(web: Any, backfill_id: str) -> Dict[str, Any]:
    """The backfill's status and runs (``runId``, ``status``, ``partition``)."""
    found = web.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
    for run in found["runs"]:
        run["partition"] = {t["key"]: t["value"] for t in run.pop("tags")}.get("dagster/partition")
    return found


def wait_backfill_runs(
    web: Any,
    backfill_id: str,
    count: int,
    timeout_s: float,
    alive: Optional[Callable[[], None]] = None,
) -> List[Dict[str, Any]]:
    """The backfill's ``count`` runs once all have ended (the daemon marks the backfill
    itself done in its next loop, up to 30 s later); ``alive()`` is called while waiting
    (it raises when a part died)."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = backfill(web, backfill_id)["runs"]
        ended = [r for r in runs if r["status"] in ("SUCCESS", "FAILURE", "CANCELED")]
        if len(ended) == count:
            return sorted(ended, key=lambda r: r["partition"] or "")
        if time.monotonic() > deadline:
            raise TimeoutError(f"backfill {backfill_id}: {runs} after {timeout_s:g} s")
        if alive is not None:
            alive()
        time.sleep(1)
