"""The executor of workflow jobs: ``graphbook_executor``'s multiprocess runs from the preloaded
forkserver (each step process sees the run's environment and current directory as they are now,
as spawn would give them, whoever started the forkserver; Dagster's multiprocess settings still
apply), and the notes stores its runs can use (a ``memory://`` notes_dir lives in one process, so
a job whose steps run in processes of their own is refused, at load for the workflow's own
executor and at the run's start for a run that picks multiprocess). Real runs."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from dagster_graphbook.integrations.dask import dask_executor
from dagster_graphbook.model.workflow import WorkflowError
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, parent_of_a_step, step_node, write_workflow

MEMORY = "memory://graphbook-notes"
ONE_PROCESS = {"Tenfold.runtime.num_workers": 0, "Tenfold.runtime.device": "cpu"}


@pytest.fixture
def flow(tmp_path: Path):
    """``(workflow file, custom nodes)``: Numbers -> Tenfold."""
    nodes = copy_nodes(tmp_path / "nodes", "mem_nodes.py", "executor_processes")
    path = write_workflow(
        tmp_path,
        "tenfold",
        [step_node("1", "Numbers", source=True), step_node("2", "Tenfold")],
        [edge("1", "out", "2")],
    )
    return path, nodes


def test_in_memory_notes_with_shards_are_refused_at_load(flow, run_wf):
    """What an operator tried: ``memory://`` notes and two shards. The shards ran in step
    processes of their own and the commit failed saying the notes were deleted (by hand, or by
    retention); now the load refuses it and says why."""
    path, nodes = flow
    with pytest.raises(WorkflowError) as refused:
        run_wf(path, [nodes], ONE_PROCESS, notes_dir=MEMORY, shards={"Tenfold": 2}, executor=None)
    said = str(refused.value)
    assert f"workflow {path} is invalid" in said
    assert f"workflow 'tenfold': notes_dir {MEMORY!r} is an in-memory store" in said
    assert "its sharded step 'Tenfold' runs its shards and commit in a process each" in said
    assert "Use a folder or an object store" in said


@pytest.mark.parametrize(
    "executor, name",
    [("multiprocess", "multiprocess"), (dask_executor, "dask")],
    ids=["multiprocess", "distributed"],
)
def test_in_memory_notes_with_an_executor_of_step_processes_are_refused_at_load(
    flow, executor, name
):
    path, nodes = flow
    spec = GraphbookWorkflow(path, custom_nodes=[nodes], notes_dir=MEMORY, executor=executor)
    with pytest.raises(WorkflowError, match=f"its executor '{name}' runs each step in a process"):
        build_definitions([spec], strict=True)


def test_in_memory_notes_in_one_process_run(flow, run_wf):
    """The store is fine where every step runs in the run's process: the default executor, and
    a sharded step whose workflow names the in-process executor."""
    path, nodes = flow
    run = run_wf(path, [nodes], ONE_PROCESS, notes_dir=MEMORY, executor=None)
    assert run.success, run.failure
    assert [n["tenfold"] for n in run.notes["Tenfold"]["out"]] == [0, 10, 20, 30, 40, 50]
    spec = GraphbookWorkflow(
        path, custom_nodes=[nodes], notes_dir=MEMORY, shards={"Tenfold": 2}, executor="in_process"
    )
    assert build_definitions([spec], strict=True).resolve_job_def("tenfold")


def test_a_run_picking_multiprocess_with_in_memory_notes_fails_at_its_start(
    flow, run_wf, dagster_home
):
    """The workflow loads (its executor runs steps in one process), but this run's execution
    config picks multiprocess (the Launchpad's choice): it fails before any step, saying why."""
    path, nodes = flow
    run = run_wf(path, [nodes], ONE_PROCESS, notes_dir=MEMORY, executor="multiprocess")
    assert not run.success
    assert (
        f"job tenfold (workflow {path}): notes_dir {MEMORY!r} is an in-memory store" in run.failure
    )
    assert "this run's execution config picks multiprocess" in run.failure
    instance = dg.DagsterInstance.from_config(dagster_home)
    started = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
    assert started == []  # refused before any step


def test_launchpad_multiprocess_sees_env_vars_set_after_the_forkserver_started(tmp_path, run_wf):
    """A run in a process whose forkserver was started by an earlier run: the step process must
    see the environment the run's process has now (as spawn would give it), not the forkserver's
    from its start."""
    from tests.support.workflows import step_node, write_workflow

    nodes = copy_nodes(tmp_path / "nodes", "env_nodes.py", "executor_env")
    cfg = {
        "execution": {"config": {"multiprocess": {"max_concurrent": 1, "retries": {"enabled": {}}}}}
    }
    outs = []
    os.environ.pop("GRAPHBOOK_FORKSERVER_TEST_VAR", None)
    try:
        for k, value in enumerate(["first", "second"]):
            os.environ["GRAPHBOOK_FORKSERVER_TEST_VAR"] = value
            out = tmp_path / f"env{k}.txt"
            wf = write_workflow(
                tmp_path, f"env{k}", [step_node("1", "Env", {"out": str(out)}, source=True)], []
            )
            run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
            assert run.success, run.failure
            outs.append(out.read_text())
    finally:
        os.environ.pop("GRAPHBOOK_FORKSERVER_TEST_VAR", None)
    assert outs == ["first", "second"], outs


def test_launchpad_multiprocess_keeps_max_concurrent_and_tag_limits(tmp_path, run_wf):
    """Property: max_concurrent, retries and tag_concurrency_limits named with multiprocess are
    accepted and the run succeeds from the forkserver."""
    from tests.support.workflows import step_node, write_workflow

    nodes = copy_nodes(tmp_path / "nodes", "env_nodes.py", "executor_env")
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


def test_launchpad_multiprocess_steps_run_in_the_runs_current_directory(tmp_path, run_wf):
    """Two launchpad-multiprocess runs from one process, the second after a chdir: its step
    process must run in the directory the run's process is in now (spawn's behaviour), not the
    one the forkserver started in."""
    from tests.support.workflows import step_node, write_workflow

    nodes = copy_nodes(tmp_path / "nodes", "cwd_nodes.py", "executor_cwd")
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
    from tests.support.workflows import step_node, write_workflow

    # as in a process where no run started the forkserver yet (one already running, started
    # by an earlier test, was started with another environment: the case tested too)
    monkeypatch.setattr(executor, "_FORKSERVER_ENV", None, raising=False)
    os.environ["GRAPHBOOK_FORKSERVER_TEST_VAR"] = "before"
    try:
        ctx = multiprocessing.get_context("forkserver")
        proc = ctx.Process(target=os.getpid)
        proc.start()
        proc.join(30)
        os.environ["GRAPHBOOK_FORKSERVER_TEST_VAR"] = "after"
        nodes = copy_nodes(tmp_path / "nodes", "env_nodes.py", "executor_env")
        out = tmp_path / "env.txt"
        wf = write_workflow(
            tmp_path, "env", [step_node("1", "Env", {"out": str(out)}, source=True)], []
        )
        cfg = {"execution": {"config": {"multiprocess": {}}}}
        run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
        assert run.success, run.failure
        seen = out.read_text()
    finally:
        os.environ.pop("GRAPHBOOK_FORKSERVER_TEST_VAR", None)
    assert seen == "after", f"the step process saw GRAPHBOOK_FORKSERVER_TEST_VAR={seen!r}"


def test_multiprocess_step_processes_fork_with_the_instance_storage_and_pandas_loaded(
    tmp_path, run_wf, monkeypatch
):
    """Every step process opens the instance (SQLAlchemy, alembic, sqlite3) and a sink step
    writes its table with pandas: the forkserver the step processes fork from has imported them
    once, so no step process spends its first second importing them. Seen from a step: the
    extension modules mapped in its parent, the forkserver."""
    from dagster_graphbook.defs import executor

    monkeypatch.setattr(executor, "_FORKSERVER_ENV", None)  # a forkserver of this run's own
    run, parent, mapped = parent_of_a_step(tmp_path, run_wf, executor="multiprocess")
    assert run.success, run.failure
    assert "from multiprocessing.forkserver import main" in parent, parent
    libraries = {
        os.path.basename(line.split()[-1]) for line in mapped.splitlines() if ".so" in line
    }
    assert any(name.startswith("_sqlite3.") for name in libraries), sorted(libraries)
    assert any("/sqlalchemy/" in line for line in mapped.splitlines()), sorted(libraries)
    assert any("/pandas/_libs/" in line for line in mapped.splitlines()), sorted(libraries)


# ---------------------------------------------------------------------------------------------
# dagster-graphbook's Ray executor: which steps run as Ray jobs, which beside the run worker
# (tests/e2e/test_deploy_distributed.py runs both on a Ray head)


def _ray_handler(**config):
    from dagster_ray.core.executor import RayStepHandler

    amounts = {k: config.pop(k, None) for k in ("num_cpus", "num_gpus", "memory", "resources")}
    return RayStepHandler(
        client=None,
        env_vars=config.pop("env_vars", None),
        runtime_env=config.pop("runtime_env", None),
        **amounts,
    )


def test_on_the_ray_executor_only_steps_asking_the_cluster_for_something_are_ray_jobs():
    """A step asking for no GPU, CPU, memory, custom resource or runtime_env runs beside the run
    worker; the ``dagster-graphbook/on-cluster`` tag decides either way, and
    ``light_steps_on_cluster`` (or executor-wide amounts, a runtime_env beyond env_vars) sends
    every step to the cluster."""
    import json

    pytest.importorskip("dagster_ray", reason="needs the ray extra")
    from dagster_graphbook.integrations.ray import job_env, on_cluster
    from dagster_graphbook.plan.gpus import ON_CLUSTER_TAG

    ray = "dagster-ray/config"
    plain = _ray_handler()
    assert not on_cluster(plain, {}, False)
    assert not on_cluster(plain, {"dagster/pool": "x", ray: json.dumps({})}, False)
    for asked in ({"num_gpus": 1}, {"num_cpus": 2}, {"memory": 2**30}, {"resources": {"ssd": 1}}):
        assert on_cluster(plain, {ray: json.dumps(asked)}, False), asked
    assert on_cluster(plain, {ray: json.dumps({"runtime_env": {"pip": ["x"]}})}, False)
    assert on_cluster(plain, {ON_CLUSTER_TAG: "true"}, False)
    assert not on_cluster(plain, {ON_CLUSTER_TAG: "false", ray: '{"num_gpus": 1}'}, False)
    assert on_cluster(plain, {}, True)  # light_steps_on_cluster
    assert not on_cluster(plain, {ON_CLUSTER_TAG: "false"}, True)
    assert on_cluster(_ray_handler(num_cpus=1), {}, False)  # every step's job asks for a CPU
    assert on_cluster(_ray_handler(runtime_env={"working_dir": "."}), {}, False)
    env_only = _ray_handler(runtime_env={"env_vars": {"A": "1"}}, env_vars=["B=2"])
    assert not on_cluster(env_only, {}, False)
    assert job_env(env_only) == {"A": "1", "B": "2"}  # what a forked step gets, as a Ray job


def test_an_empty_graphbook_ray_options_puts_a_step_on_the_cluster():
    """``@graphbook.ray.options()`` asking for nothing tags the step for the cluster; a step
    with no options has no such tag, and one asking for a GPU has only its Ray amounts."""
    from dagster_graphbook.plan.gpus import ON_CLUSTER_TAG
    from graphbook import Graph
    from graphbook.steps import SourceStep, Step

    class Source(SourceStep):
        Outputs = ["out"]

        def load(self):
            return {"out": [{"i": 0}]}

    class Marked(Step):
        Ray_Options: dict = {}  # what graphbook.ray.options() sets

    class OnGpu(Step):
        Ray_Options = {"num_gpus": 1}

    g = Graph()
    source = g.step(Source)
    g.step(Marked).bind(source)
    g.step(OnGpu).bind(source)
    g.name = "marks"
    job = build_definitions([GraphbookWorkflow(g)]).resolve_job_def("marks")
    tags = {n.name.split("__", 1)[1]: n.definition.tags for n in job.graph.nodes}
    assert tags["Marked"][ON_CLUSTER_TAG] == "true"
    assert ON_CLUSTER_TAG not in tags["Source"] and ON_CLUSTER_TAG not in tags["OnGpu"]
    assert "num_gpus" in tags["OnGpu"]["dagster-ray/config"]
