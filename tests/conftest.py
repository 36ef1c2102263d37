"""Shared fixtures and pytest hooks: the repository root, a throwaway DAGSTER_HOME, a run helper,
servers (webserver, S3) and once-per-run inputs. The helpers they call live in tests/support/;
import them from there, not from here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional

import pytest

from tests.support.leaks import end_shm_watch
from tests.support.network import Listener
from tests.support.nightly import DAYS, NIGHTLY_DAY, PER_DAY, shapes_data
from tests.support.paths import EXAMPLES, REPO
from tests.support.s3 import Bucket, moto_server, s3_env
from tests.support.shared_inputs import once_per_run
from tests.support.webserver import serve_webserver
from tests.support.workflows import edge, resource_node, step_node, write_nodes, write_workflow

# tests/e2e/test_production_rehearsal.py and tests/e2e/test_deploy_distributed.py still import
# DAYS, PER_DAY, REPO, _shapes_data, Bucket, moto_server, s3_env and serve_webserver from here;
# everything else imports tests.support.*
_shapes_data = shapes_data


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.hookimpl(trylast=True)  # after the test's fixtures' teardown, which may still check
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """A test's /dev/shm watch (``shm_snapshot``) ends with it, not with the worker."""
    end_shm_watch()


# what a wheel build reads (copied out, so the build leaves nothing in the checkout)
BUILD_INPUTS = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "dagster_graphbook_alias.pth",
)


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


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    """``dagster-webserver -w workspace.yaml`` on a free loopback port with its own instance,
    one per module."""
    home = tmp_path_factory.mktemp("dagster_home")
    with serve_webserver(REPO / "workspace.yaml", home) as server:
        yield server


# ---------------------------------------------------------------------------------------------
# Inputs of the nightly shapes demo in a temporary folder (the repository's data/ and models/ stay
# untouched)


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


# ---------------------------------------------------------------------------------------------
# The nightly shapes project (tests/e2e/test_nightly.py, tests/e2e/test_deploy_distributed.py)


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Dict[str, Any]:
    """Three generated days and a checkpoint trained by examples/nightly/train_shapes_cnn.py
    (seconds), once per test run."""

    def make(root: Path) -> str:
        data = shapes_data()
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


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server (``python -m moto.server``) on a free port of 127.0.0.1 for the session;
    its endpoint URL. Skips where moto's server extra is not installed (the dev extra has it)."""
    with moto_server() as endpoint:
        yield endpoint


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
