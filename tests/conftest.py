"""Shared fixtures: the repository root, a throwaway DAGSTER_HOME, workflow-file builders and a run
helper."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import pytest

if TYPE_CHECKING:
    import dagster as dg

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "nightly"
DAYS = ("2026-03-01", "2026-03-02", "2026-03-03")  # the nightly project's generated days
PER_DAY = 48


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


# what a wheel build reads (copied out, so the build leaves nothing in the checkout)
BUILD_INPUTS = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "dagster_graphbook_alias.pth",
)


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]
) -> Tuple[Path, Any]:
    """``make(folder)`` once per test run, and ``(folder, what it returned)``.

    Session fixtures are made once per process, and ``pytest -n`` (scripts/test.sh) runs one
    process per worker: an expensive input (a trained checkpoint, a wheel) is made by the first
    worker that needs it, in the run's shared temporary folder, while the others wait for it
    (pytest-xdist's recipe). ``make``'s result must be JSON. Tests only read the folder, or
    write where no other test module does."""
    import fcntl
    import os
    import shutil

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    folder, made = shared / name, shared / f"{name}.json"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed try left
            folder.mkdir()
            made.write_text(json.dumps(make(folder)))
    return folder, json.loads(made.read_text())


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this checkout, as ``pip wheel --no-deps`` builds it (without build isolation:
    the build backend comes from this environment, no download); built once per test run."""

    def build(root: Path) -> str:
        import shutil

        src = root / "src"
        src.mkdir()
        for name in BUILD_INPUTS:
            shutil.copy2(REPO / name, src / name)
        shutil.copytree(
            REPO / "dagster_graphbook",
            src / "dagster_graphbook",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
            + [str(src), "-w", str(root / "dist")],
            check=True,
            timeout=300,
        )
        (built,) = (root / "dist").glob("dagster_graphbook-*.whl")
        return built.name

    root, name = once_per_run(tmp_path_factory, "wheel", build)
    return root / "dist" / name


@pytest.fixture(scope="session")
def instance_storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The storage of an empty Dagster instance (runs and schedules in SQLite, Dagster's schema
    made), once per test run: an instance opened on an empty folder spends 0.6 s of CPU making
    its tables, and hundreds of tests open one. No ``dagster.yaml``: what the package writes
    there on first use is still written by the code under test."""

    def make(root: Path) -> None:
        import dagster as dg

        with dg.DagsterInstance.from_config(str(root)) as instance:
            instance.get_runs(limit=1)

    folder, _ = once_per_run(tmp_path_factory, "instance_storage", make)
    return folder


@pytest.fixture
def dagster_home(tmp_path: Path, instance_storage: Path) -> str:
    """A DAGSTER_HOME of the test's own, holding an empty instance's storage."""
    home = tmp_path / "dagster_home"
    shutil.copytree(instance_storage, home)
    return str(home)


@pytest.fixture
def run_wf(dagster_home: str):
    """``run_wf(workflow, custom_nodes=[...], params={...}, **kw)`` against the test's own
    DAGSTER_HOME, in process unless ``executor`` is given."""
    from dagster_graphbook import run_workflow

    def run(
        workflow: Any,
        custom_nodes: Iterable[Any] = (),
        params: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("dagster_home", dagster_home)
        # in one process unless a test names another executor (executor=None: the job's own
        # default, multiprocess for a sharded workflow, seconds a run on this suite's budget)
        kwargs.setdefault("executor", "in_process")
        return run_workflow(
            workflow, custom_nodes=list(custom_nodes), params=params or {}, **kwargs
        )

    return run


@dataclasses.dataclass
class Listener:
    """A TCP listener on 127.0.0.1 of the test's own: ``connections`` holds every connection
    made to ``port`` (what a preview or a page must never reach)."""

    port: int
    connections: List[Any]


@pytest.fixture
def listener() -> Iterator[Listener]:
    """A ``Listener`` accepting in a thread for the whole test, closed at its end."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    found = Listener(server.getsockname()[1], [])
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                found.connections.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join(5)
        server.close()
        for connection in found.connections:
            connection.close()


# ---------------------------------------------------------------------------------------------
# Builders for workflow files in Graphbook's editor format


def step_node(
    node_id: str,
    name: str,
    params: Optional[Dict[str, Any]] = None,
    *,
    label: Optional[str] = None,
    source: bool = False,
    outputs: Optional[List[str]] = None,
    **extra: Any,
) -> dict:
    """A ``step`` node as the editor saves it (``params`` are values; stored as ``{"value":
    v}``)."""
    data: Dict[str, Any] = {
        "name": name,
        "category": "",
        "parameters": {k: {"type": "any", "value": v} for k, v in (params or {}).items()},
        "inputs": [] if source else ["in"],
        "outputs": outputs or ["out"],
        "isCollapsed": False,
        "module": "transient_module",
    }
    if label is not None:
        data["label"] = label
    return {"id": node_id, "type": "step", "position": {"x": 0, "y": 0}, "data": data, **extra}


def resource_node(
    node_id: str, name: str, params: Optional[Dict[str, Any]] = None, *, label: Optional[str] = None
) -> dict:
    data: Dict[str, Any] = {
        "name": name,
        "category": "Util",
        "parameters": {k: {"type": "any", "value": v} for k, v in (params or {}).items()},
    }
    if label is not None:
        data["label"] = label
    return {"id": node_id, "type": "resource", "position": {"x": 0, "y": 0}, "data": data}


def edge(
    src: str, src_pin: str, dst: str, dst_pin: str = "in", edge_id: Optional[str] = None
) -> dict:
    return {
        "id": edge_id or f"e-{src}{src_pin}-{dst}{dst_pin}",
        "source": src,
        "sourceHandle": src_pin,
        "target": dst,
        "targetHandle": dst_pin,
        "data": {},
    }


def write_workflow(folder: Path, name: str, nodes: List[dict], edges: List[dict]) -> Path:
    path = folder / f"{name}.json"
    path.write_text(
        json.dumps({"version": "0", "type": "workflow", "nodes": nodes, "edges": edges}, indent=2)
    )
    return path


def write_nodes(folder: Path, filename: str, code: str) -> Path:
    """Write a custom node file (dedented) into ``folder`` and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(textwrap.dedent(code))
    return folder


@pytest.fixture
def wf_builders():
    """The builders above, for tests that prefer a fixture over an import."""
    return dict(
        step_node=step_node,
        resource_node=resource_node,
        edge=edge,
        write_workflow=write_workflow,
        write_nodes=write_nodes,
    )


# ---------------------------------------------------------------------------------------------
# A real dagster-webserver on loopback (dagster.md §4.4), shared by the UI test modules


WEBSERVER_INSTANCE_YAML = """\
telemetry:
  enabled: false
run_coordinator:              # no daemon in tests: launched runs start at once instead of queueing
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""


class Webserver:
    """A running webserver: its URL, its instance folder, and the GraphQL calls the UI makes."""

    def __init__(self, url: str, home: Path, ready_s: float):
        self.url, self.home, self.ready_s = url, home, ready_s

    def graphql(self, query: str, variables: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        import requests

        response = requests.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60
        )
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body
        return body["data"]

    def launch(
        self,
        job: str,
        run_config: Dict[str, Any],
        *,
        tags: Optional[Dict[str, str]] = None,
        **selector: Any,
    ) -> str:
        """``launchRun`` as the launchpad sends it; ``selector`` adds e.g. ``assetSelection``,
        ``tags`` become run tags."""
        params: Dict[str, Any] = {
            "selector": {
                "repositoryLocationName": "graphbook",
                "repositoryName": "__repository__",
                "jobName": job,
                **selector,
            },
            "runConfigData": run_config,
        }
        if tags:
            params["executionMetadata"] = {
                "tags": [{"key": k, "value": v} for k, v in tags.items()]
            }
        data = self.graphql(LAUNCH_RUN, {"p": params})["launchRun"]
        assert data["__typename"] == "LaunchRunSuccess", data
        return data["run"]["runId"]

    def wait(self, run_id: str, timeout_s: float = 240) -> str:
        """Poll until the run finishes and return its status."""
        import time

        start = time.time()
        while time.time() - start < timeout_s:
            status = self.graphql(RUN_STATUS, {"id": run_id})["runOrError"]["status"]
            if status in ("SUCCESS", "FAILURE", "CANCELED"):
                return status
            time.sleep(0.25)  # a launched run of the sample ends in seconds
        raise TimeoutError(f"run {run_id} still running after {timeout_s} s")

    def expect_success(self, run_id: str, timeout_s: float = 240) -> None:
        """Wait for the run; if it did not succeed, fail with the errors of its event log."""
        status = self.wait(run_id, timeout_s)
        if status != "SUCCESS":
            events = self.graphql(RUN_ERRORS, {"id": run_id})["logsForRun"].get("events", [])
            errors = [
                f"{e.get('stepKey')}: {e['message']} {(e.get('error') or {}).get('message', '')}"
                for e in events
                if e.get("level") == "ERROR"
            ]
            raise AssertionError(f"run {run_id} ended {status}:\n" + "\n".join(errors))


LAUNCH_RUN = """
mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
  __typename
  ... on LaunchRunSuccess { run { runId } }
  ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } }
  ... on InvalidSubsetError { message }
} }"""

RUN_STATUS = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"

RUN_ERRORS = """
query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
  ... on MessageEvent { message level stepKey }
  ... on ExecutionStepFailureEvent { error { message } }
  ... on RunFailureEvent { error { message } }
} } } }"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    """``dagster-webserver -w workspace.yaml`` on a free loopback port with its own instance,
    one per module."""
    home = tmp_path_factory.mktemp("dagster_home")
    with serve_webserver(REPO / "workspace.yaml", home) as server:
        yield server


@contextlib.contextmanager
def serve_webserver(
    workspace: Path,
    home: Path,
    instance_yaml: Optional[str] = WEBSERVER_INSTANCE_YAML,
    env: Optional[Dict[str, str]] = None,
) -> Iterator[Webserver]:
    """``dagster-webserver -w WORKSPACE`` (run from the repository root) with its instance in
    ``home``, on a free loopback port; stopped on exit. ``instance_yaml`` is written as the
    instance's ``dagster.yaml`` (None: keep the one there); ``env`` adds to its environment."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import requests

    if instance_yaml is not None:
        (home / "dagster.yaml").write_text(instance_yaml)
    port = _free_port()
    log_path = home / "webserver.log"
    # the checkout first: the code servers run in their location's working directory, where an
    # editable install made from another checkout (a git worktree sharing its venv) would
    # otherwise give the location and its runs that checkout's package, not the one under test
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    with open(log_path, "w") as log:
        # start_new_session + SIGINT reset: the whole group can be stopped with SIGINT even when
        # pytest
        # itself was started with SIGINT ignored (dagster.md §4.4).
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster_webserver",
                "-w",
                str(workspace),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            cwd=REPO,
            env={**os.environ, **(env or {}), "DAGSTER_HOME": str(home), "PYTHONPATH": pythonpath},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    url = f"http://127.0.0.1:{port}"
    start = time.time()
    try:
        while True:
            try:
                if requests.get(f"{url}/server_info", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None or time.time() - start > 120:
                raise RuntimeError(
                    f"dagster-webserver did not start within 120 s:\n{log_path.read_text()[-3000:]}"
                )
            time.sleep(0.25)
        yield Webserver(url, home, time.time() - start)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ---------------------------------------------------------------------------------------------
# Inputs of the nightly shapes demo in a temporary folder (the repository's data/ and models/ stay
# untouched)


NIGHTLY_DAY = "2025-06-01"  # a partition of the demo job (daily from 2025-01-01)


@pytest.fixture(scope="session")
def nightly_inputs(tmp_path_factory) -> Dict[str, Any]:
    """One day of generated shapes (40 images) and a quickly trained checkpoint, made with the
    demo's own scripts, once per test run.

    The model is trained briefly (seconds): UI tests check the plumbing, not the accuracy.
    """

    def make(root: Path) -> None:
        scripts = REPO / "examples" / "nightly"
        subprocess.run(
            [
                sys.executable,
                str(scripts / "shapes_data.py"),
                "--root",
                str(root / "incoming"),
                "--date",
                NIGHTLY_DAY,
                "--count",
                "40",
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                sys.executable,
                str(scripts / "train_shapes_cnn.py"),
                "--out",
                str(root / "shapes_cnn.pt"),
                "--train-count",
                "600",
                "--epochs",
                "2",
            ],
            check=True,
            capture_output=True,
        )

    root, _ = once_per_run(tmp_path_factory, "nightly", make)
    return {
        "root": root,
        "day": NIGHTLY_DAY,
        "count": 40,
        "incoming": root / "incoming",
        "checkpoint": root / "shapes_cnn.pt",
    }


# A step that writes what started its process: the parent's command line, then its memory map
# (which process a step process forked from, and what that one had loaded)
PARENT_NODES = """
    import os

    from graphbook import param, source, step


    @step("P/Parent")
    @source()
    @param("out", "string")
    def parent(ctx):
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\\0", b" ").decode()
        with open(f"/proc/{os.getppid()}/maps") as f:
            mapped = f.read()
        with open(ctx.out, "w") as f:
            f.write(cmd + "\\n" + mapped)
        yield {"out": {"pid": os.getpid()}}
"""


def parent_of_a_step(tmp_path: Path, run_wf: Any, **run: Any) -> Tuple[Any, str, str]:
    """Run a one-step workflow of ``PARENT_NODES`` (``run`` goes to ``run_wf``): the run, and
    the step process's parent's command line and memory map."""
    nodes = write_nodes(tmp_path / "nodes", "parent_nodes.py", PARENT_NODES)
    out = tmp_path / "parent.txt"
    wf = write_workflow(
        tmp_path, "parent", [step_node("1", "Parent", {"out": str(out)}, source=True)], []
    )
    result = run_wf(wf, [nodes], **run)
    if not result.success:
        return result, "", ""
    cmd, mapped = out.read_text().split("\n", 1)
    return result, cmd, mapped


# A chain of steps: a source and N-1 steps each reading the one before (building and depth tests)
CHAIN_NODES = """
from graphbook.steps import SourceStep, Step


class Start(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"v": 0}]}


class Inc(Step):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {}
"""


def chain_workflow(folder: Path, steps: int, name: str, labelled: bool = False) -> Path:
    """``steps`` steps in a row (``Start``, then ``Inc`` nodes, labelled ``Inc<i>`` if asked)."""
    nodes = [step_node("0", "Start", {}, source=True)] + [
        step_node(str(i), "Inc", {}, label=f"Inc{i}" if labelled else None) for i in range(1, steps)
    ]
    edges = [edge(str(i - 1), "out", str(i)) for i in range(1, steps)]
    return write_workflow(folder, name, nodes, edges)


# ---------------------------------------------------------------------------------------------
# The nightly shapes project (tests/e2e/test_nightly.py, tests/e2e/test_deploy_distributed.py)


def _shapes_data():
    spec = importlib.util.spec_from_file_location(
        "nightly_shapes_data_under_test", EXAMPLES / "shapes_data.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Dict[str, Any]:
    """Three generated days and a checkpoint trained by examples/nightly/train_shapes_cnn.py
    (seconds), once per test run."""

    def make(root: Path) -> str:
        data = _shapes_data()
        for day in DAYS:
            data.make_day(root / "data" / "incoming", day, PER_DAY)
        out = subprocess.run(
            [
                sys.executable,
                str(EXAMPLES / "train_shapes_cnn.py"),
                "--out",
                str(root / "models" / "shapes_cnn.pt"),
                "--train-count",
                "2000",
                "--epochs",
                "8",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    root, stdout = once_per_run(tmp_path_factory, "nightly_project", make)
    val = float(re.search(r"val accuracy ([0-9.]+),", stdout).group(1))
    assert val >= 0.9, stdout
    return {"root": root, "val_accuracy": val}


# ---------------------------------------------------------------------------------------------
# A defs folder loaded the way Dagster loads one (tests/defs/component/test_component.py,
# tests/defs/test_automation.py, tests/plan/test_gpus.py)


def _load_defs_folder(tmp_path: Path, package: str, yaml_by_folder: dict) -> dg.Definitions:
    """A project in ``tmp_path`` (pyproject.toml + package ``package``) with one defs.yaml per
    folder."""
    from dagster.components import load_defs

    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "{package}"\nversion = "0"\n')
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    for folder, text in yaml_by_folder.items():
        (root / folder).mkdir()
        (root / folder / "defs.yaml").write_text(textwrap.dedent(text))
    sys.path.insert(0, str(tmp_path))
    try:
        return load_defs(importlib.import_module(package), project_root=tmp_path)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]


# ---------------------------------------------------------------------------------------------
# A folder made read-only for real, under live processes


@contextlib.contextmanager
def read_only_switch(folder: Any) -> Iterator[Any]:
    """``(freeze, thaw)`` for ``folder`` as an operator does it: as root (who ignores mode bits)
    a read-only bind mount over it (a new mount, so taking it read-only is not refused for the
    files live processes hold open; opens for writing and unlinks through it fail with EROFS);
    otherwise ``chmod a-w`` (EACCES). Whatever is mounted is unmounted at the end."""
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    if os.geteuid() != 0:
        try:
            yield (lambda: os.chmod(folder, 0o555)), (lambda: os.chmod(folder, 0o755))
        finally:
            os.chmod(folder, 0o755)
        return
    mounted: List[str] = []

    def freeze() -> None:
        subprocess.run(["mount", "--bind", folder, folder], check=True)
        mounted.append(folder)
        subprocess.run(["mount", "-o", "remount,bind,ro", folder], check=True)
        with pytest.raises(OSError):
            open(os.path.join(folder, "probe"), "w").close()

    def thaw() -> None:
        subprocess.run(["umount", mounted.pop()], check=True)

    try:
        yield freeze, thaw
    finally:
        for path in mounted:
            subprocess.run(["umount", "-l", path], check=False)


def can_make_read_only(tmp_path: Path) -> bool:
    """Whether ``read_only_switch`` works here (root in a container may not mount)."""
    if os.geteuid() != 0:
        return True
    probe = str(tmp_path / "mount-probe")
    os.makedirs(probe, exist_ok=True)
    if subprocess.run(["mount", "--bind", probe, probe], capture_output=True).returncode != 0:
        return False
    subprocess.run(["umount", probe], check=True)
    return True


# ---------------------------------------------------------------------------------------------
# Parallel runs: scripts/test.sh runs ``pytest -n <cores + 1> --dist loadgroup``. Tests that must
# not be spread over workers carry ``@pytest.mark.xdist_group(name)``: one worker runs a group's
# tests one after another. ``heavy_or_timed`` keeps the heaviest load (the soak) apart from the
# tests that time the machine (worker priority, a 0.5 s bound); a module whose tests write into
# one shared folder names its own group (tests/e2e/test_nightly.py).


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: List[pytest.Item]
) -> Iterator[None]:
    """A module whose tests use a module-scoped fixture of ours (a webserver, a Ray or Dask
    cluster, a run its tests read) is one group, so that the fixture is made once, not once per
    worker that runs one of its tests (a whole module: a test may ask for it by name at run time,
    ``request.getfixturevalue``). A test with a group of its own keeps it."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    def shares(item: pytest.Item) -> bool:
        info = getattr(item, "_fixtureinfo", None)
        return info is not None and any(
            fd.scope == "module" and fd.func.__module__.startswith("tests.")
            for fds in info.name2fixturedefs.values()
            for fd in fds
        )

    sharing = {module(item) for item in items if shares(item)}
    for item in items:
        if module(item) in sharing and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(module(item)))
    # the tests of minutes first (scripts/test.sh keeps this order: --no-loadscope-reorder), so
    # that a worker starts each at once and the rest of the suite runs beside it, instead of
    # one starting last and running alone at the end
    items.sort(key=_long_first)
    _skip_gpu_tests_without_a_gpu(items)
    yield  # pytest-xdist's hook reads the groups in there
    if getattr(config.option, "loadgroup", False):
        _group_suffixes(items)


def _skip_gpu_tests_without_a_gpu(items: List[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip where NVML counts no GPU (NVML starts no CUDA in this process,
    which would fix its GPUs before a shard's lease could choose them); the device check sets
    DAGSTER_GRAPHBOOK_REQUIRE_GPU=1, so that there they fail rather than skip."""
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked or os.environ.get("DAGSTER_GRAPHBOOK_REQUIRE_GPU") == "1":
        return
    from dagster_graphbook.execution.ownership.leases import nvml_gpu_count

    if nvml_gpu_count() > 0:
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU: benchmarks/gpu/device_check.sh runs it on a lent GPU machine"
    )
    for item in marked:
        item.add_marker(skip)


LONG_FIRST = ("rehearsal", "distributed", "soak", "browser", "long")  # markers, longest first


def _long_first(item: pytest.Item) -> int:
    """Where ``item`` goes in the run's order: by the first of LONG_FIRST's markers it carries;
    the others after them, in the order collected (the sort is stable)."""
    for rank, marker in enumerate(LONG_FIRST):
        if item.get_closest_marker(marker):
            return rank
    return len(LONG_FIRST)


def _group_suffixes(items: List[pytest.Item]) -> None:
    """pytest-xdist's workers tell the scheduler a test's group as a ``@group`` suffix of its node
    id, which xdist (3.8) writes into ``item._nodeid``; since pytest 9.2 the node id is read from
    ``item._id``, so the groups were silently dropped (pytest-dev/pytest-xdist#1386). Where the
    suffix did not take, write it where pytest reads the node id."""
    for item in items:
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            item._id = type(item._id).parse(item.nodeid + suffix)


# ---------------------------------------------------------------------------------------------
# A real S3-compatible server: moto's server mode on 127.0.0.1, s3fs as the fsspec driver


@dataclasses.dataclass
class Bucket:
    """A bucket on the test's moto server: ``url`` (``s3://<name>``), the server's ``endpoint``
    and an ``s3fs`` filesystem reading it fresh."""

    name: str
    endpoint: str
    fs: Any

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    def objects(self, prefix: str = "") -> Dict[str, int]:
        """Every object under ``s3://<name>/<prefix>`` (key -> bytes), listed fresh."""
        self.fs.invalidate_cache()
        found = self.fs.find(f"{self.name}/{prefix}".rstrip("/"), detail=True)
        return {key[len(self.name) + 1 :]: info["size"] for key, info in found.items()}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server (``python -m moto.server``) on a free port of 127.0.0.1 for the session;
    its endpoint URL. Skips where moto's server extra is not installed (the dev extra has it)."""
    with moto_server() as endpoint:
        yield endpoint


@contextlib.contextmanager
def moto_server(log: Optional[Path] = None) -> Iterator[str]:
    """A moto server of its own (``python -m moto.server``) on a free port of 127.0.0.1, stopped
    at the end; its endpoint URL. ``log``: a file for its output, a line per request served."""
    pytest.importorskip("moto.server", reason="moto[server] (dev extra) is not installed")
    pytest.importorskip("s3fs", reason="s3fs (the s3 extra) is not installed")
    import requests

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with contextlib.ExitStack() as files:  # the server keeps its own copy of the log's fd
        err = files.enter_context(log.open("w")) if log else subprocess.DEVNULL
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,  # werkzeug's access log: a line per request
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(endpoint, timeout=2)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, "moto's server exited at start"
                assert time.monotonic() < deadline, "moto's server did not answer in 60 s"
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def s3_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Point boto (in this process and the processes it starts) at ``endpoint`` with dummy
    credentials, and drop s3fs's cached filesystems (they keep the endpoint they connected to)."""
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bucket]:
    """A new empty bucket on the session's moto server, reached through AWS_ENDPOINT_URL."""
    import s3fs

    s3_env(monkeypatch, s3_server)
    name = f"graphbook-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server}, skip_instance_cache=True)
    fs.mkdir(name)
    yield Bucket(name, s3_server, fs)
    s3fs.S3FileSystem.clear_instance_cache()
