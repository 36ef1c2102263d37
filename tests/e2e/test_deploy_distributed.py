"""The sample and nightly workflows on local Dask and Ray clusters on loopback (marker
``distributed``): notes and outputs as in one process; partitioned runs and two concurrent runs
of one job; a Graphbook program written for ``graphbook.ray`` run unchanged on Ray."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import dagster as dg
import pandas as pd
import pytest

from dagster_graphbook import GraphbookWorkflow, run_workflow
from dagster_graphbook.defs.definitions import build_workflow
from dagster_graphbook.plan.translator import GraphbookTranslator
from dagster_graphbook.runner.failure import failure_message as _failure_message
from dagster_graphbook.runner.results import load_notes as _load_notes
from dagster_graphbook.runner.run_config import run_config_for
from tests.conftest import DAYS, PER_DAY, REPO, _shapes_data
from tests.e2e import distributed_jobs
from tests.e2e.test_cli_executor import cli_materialize, cli_notes, cli_project, cli_run_id
from tests.e2e.test_nightly_sharded import TIMINGS, _files, _recorded

pytestmark = pytest.mark.distributed
distributed = pytest.importorskip(
    "distributed", reason="needs the distributed extra: pip install -e '.[distributed]'"
)
pytest.importorskip(
    "dagster_dask", reason="needs the distributed extra: pip install -e '.[distributed]'"
)

# Two xdist groups, not one for the module: the Dask tests share the module's Dask cluster, the
# Ray tests its Ray head (one Ray head at a time), each group on one worker (tests/conftest.py)
ON_DASK = pytest.mark.xdist_group("deploy_distributed_dask")
ON_RAY = pytest.mark.xdist_group("deploy_distributed_ray")

SAMPLE = (str(REPO / "workflows" / "sample.json"), (str(REPO / "custom_nodes" / "sample"),))
NIGHTLY = (
    str(REPO / "workflows" / "nightly_shapes.json"),
    (str(REPO / "custom_nodes" / "nightly"),),
)


@pytest.fixture(scope="module")
def dask_cluster():
    """Two worker processes, one thread each, scheduler and workers on 127.0.0.1."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def _run_on(
    executor: str,
    address: str,
    workflow: tuple,
    home: str,
    notes: str,
    params: Dict[str, Any],
    partition: Optional[str] = None,
) -> Any:
    source, nodes = workflow
    recon = dg.build_reconstructable_job(
        "tests.e2e.distributed_jobs",
        "job",
        reconstructable_args=(executor, address, source, nodes, notes, partition is not None),
    )
    wdefs = build_workflow(GraphbookWorkflow(source, custom_nodes=list(nodes)))
    tags = {"dagster/partition": partition} if partition else {}
    with dg.DagsterInstance.from_config(home) as instance:
        result = dg.execute_job(
            recon,
            instance=instance,
            run_config=run_config_for(wdefs.workflow, params),
            tags=tags,
            raise_on_error=False,
        )
        assert result.success, _failure_message(instance, result.run_id)
        return _load_notes(result.run_id, wdefs, GraphbookTranslator(), instance)


@ON_DASK
def test_sample_workflow_on_dask_matches_one_process(dask_cluster, tmp_path, dagster_home):
    params = {"GenerateNumbers.amount": 40, "GenerateNumbers.seed": 7}
    notes = _run_on("dask", dask_cluster, SAMPLE, dagster_home, str(tmp_path / "notes"), params)
    local = run_workflow(
        SAMPLE[0],
        custom_nodes=list(SAMPLE[1]),
        params=params,
        dagster_home=str(tmp_path / "local_home"),
    )
    assert local.success, local.failure
    assert notes == local.notes
    assert len(notes["GenerateNumbers"]["out"]) == 40


@ON_DASK
def test_two_runs_at_once_on_one_dask_cluster_both_run_their_steps(
    dask_cluster, tmp_path, dagster_home
):
    """dagster-dask keyed tasks by job and step only: the second run silently ran nothing.

    The two runs are two processes, as two real runs are (in two threads of one process, CPython
    3.11's ast module, which formatting a traceback uses, can fail with "AST constructor recursion
    depth mismatch", python/cpython#106905)."""
    with dg.DagsterInstance.from_config(
        dagster_home
    ) as instance:  # create the sqlite storage once, not in both processes
        instance.get_runs()
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=spawn) as pool:
        futures = {
            seed: pool.submit(
                _run_on,
                "dask",
                dask_cluster,
                SAMPLE,
                dagster_home,
                str(tmp_path / f"notes{seed}"),
                {"GenerateNumbers.amount": 10 + seed, "GenerateNumbers.seed": seed},
            )
            for seed in (1, 2)
        }
        results = {seed: future.result(timeout=300) for seed, future in futures.items()}
    assert {seed: len(notes["GenerateNumbers"]["out"]) for seed, notes in results.items()} == {
        1: 11,
        2: 12,
    }
    assert all(
        len(notes["Transform"]["out"]) == len(notes["GenerateNumbers"]["out"])
        for notes in results.values()
    )


# on Ray, a day of the partitioned job is the run of
# test_nightly_classify_in_4_shards_on_ray_gives_the_unsharded_results: one nightly run of Ray jobs
# (a Ray job per step, about 3 CPU-s each on 2 cores) serves both
@pytest.mark.parametrize("executor", [pytest.param("dask", marks=ON_DASK)])
def test_nightly_partition_on_a_cluster(project, executor, request, tmp_path, dagster_home):
    """A daily partition (dagster-dask failed on partitioned runs) with absolute paths: the images
    classified, the confident ones resized into the output folder."""
    address = request.getfixturevalue(f"{executor}_cluster")
    root: Path = project["root"]
    day = DAYS[0]
    params = {
        "IncomingImages.folder": f"{root}/data/incoming/{{partition_key}}",
        "SaveResized.output_dir": f"{tmp_path}/out/{{partition_key}}",
    }
    source, nodes = NIGHTLY
    recon_params = dict(params)
    wdefs = build_workflow(GraphbookWorkflow(source, custom_nodes=list(nodes)))
    config = run_config_for(wdefs.workflow, recon_params)
    config["resources"] = {
        "nightly_shapes__ShapesModel": {
            "config": {"checkpoint": str(root / "models" / "shapes_cnn.pt")}
        }
    }
    recon = dg.build_reconstructable_job(
        "tests.e2e.distributed_jobs",
        "job",
        reconstructable_args=(executor, address, source, nodes, str(tmp_path / "notes"), True),
    )
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = dg.execute_job(
            recon,
            instance=instance,
            run_config=config,
            tags={"dagster/partition": day},
            raise_on_error=False,
        )
        assert result.success, _failure_message(instance, result.run_id)
        notes = _load_notes(result.run_id, wdefs, GraphbookTranslator(), instance)
        accuracy = (
            instance.get_latest_materialization_event(
                dg.AssetKey(["nightly_shapes", "ClassifyShapes"])
            )
            .asset_materialization.metadata["accuracy"]
            .value
        )
    assert len(notes["IncomingImages"]["out"]) == PER_DAY
    assert accuracy >= 0.9
    confident = notes["ReviewSplit"]["confident"]
    assert len(confident) + len(notes["ReviewSplit"]["review"]) == PER_DAY
    written = sorted((tmp_path / "out" / day).rglob("*.png"))
    assert len(written) == len(confident) > 0


# ---------------------------------------------------------------------------------------------
# Ray: a head node on 127.0.0.1 with its job server; dagster-ray runs each step as a Ray job


@contextlib.contextmanager
def _ray_head(gpus: int) -> Iterator[str]:
    """A Ray head with ``gpus`` logical GPUs (``production_parts.ray_node``: its own process
    group, temporary folder and ports); yields its job server's address."""
    from tests.e2e.production_parts import PartUnavailable, ray_node

    try:
        with ray_node(gpus) as head:
            assert head.dashboard is not None
            yield head.dashboard
    except PartUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray head with 4 logical GPUs (`_ray_head`)."""
    with _ray_head(4) as address:
        yield address


@ON_RAY
def test_sample_workflow_on_ray_matches_one_process(ray_cluster, tmp_path, dagster_home):
    params = {"GenerateNumbers.amount": 40, "GenerateNumbers.seed": 7}
    notes = _run_on("ray", ray_cluster, SAMPLE, dagster_home, str(tmp_path / "notes"), params)
    local = run_workflow(
        SAMPLE[0],
        custom_nodes=list(SAMPLE[1]),
        params=params,
        dagster_home=str(tmp_path / "local_home"),
    )
    assert local.success, local.failure
    assert notes == local.notes


# A Graphbook 0.13.3 program for Ray, unchanged: Graphbook's imports, ``graphbook.ray.options`` on
# a step, ``g.run(executor=RayExecutor(address=...))``. Each step records the GPUs Ray gave its
# process (Ray sets CUDA_VISIBLE_DEVICES for a job's entrypoint from its num_gpus), its pid and
# whether it runs as a Ray job (Ray gives a job's entrypoint RAY_JOB_CONFIG_JSON_ENV_VAR).
GRAPHBOOK_RAY_PROGRAM = """
import os

import graphbook as gb
from graphbook import steps
from graphbook.ray import RayExecutor, options


class Numbers(steps.GeneratorSourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        ray_job = "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ
        for i in range(3):
            gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
            yield {"out": {"i": i, "source_gpus": gpus, "pid": os.getpid(), "ray_job": ray_job}}


@gb.step("Inference/Predict")
@options(num_gpus=1)
def predict(ctx, data):
    data["predict_gpus"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    data["y"] = data["i"] * 10
    data["predict_ray_job"] = "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ


g = gb.Graph()


@g()
def _():
    numbers = g.step(Numbers)
    model = g.step(predict)
    model.bind(numbers)


if __name__ == "__main__":
    g.run(executor=RayExecutor(address="{address}"), start_web_server=False)
"""


# the program with a third step marked for the cluster by an empty ``options()``: it asks for
# nothing, and runs as a Ray job all the same
MARKED_STEP = """
@gb.step("Inference/Tally")
@options()
def tally(ctx, data):
    data["tally_ray_job"] = "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ


g = gb.Graph()
"""


def _where_steps_ran(instance: dg.DagsterInstance, run_id: str) -> Dict[str, Dict[str, str]]:
    """Each step's STEP_WORKER_STARTING metadata (a Ray job's "Ray Submission ID", a forked
    step's "Beside the run worker") and its process's pid (STEP_WORKER_STARTED's)."""
    found: Dict[str, Dict[str, str]] = {}
    for kind in (dg.DagsterEventType.STEP_WORKER_STARTING, dg.DagsterEventType.STEP_WORKER_STARTED):
        for record in instance.get_records_for_run(run_id, of_type=kind).records:
            entry = record.event_log_entry
            metadata = entry.dagster_event.event_specific_data.metadata
            found.setdefault(entry.step_key, {}).update({k: v.value for k, v in metadata.items()})
    return found


@ON_RAY
def test_graphbook_ray_program_runs_unchanged_on_the_cluster(ray_cluster, tmp_path, dagster_home):
    """``python app.py`` runs the workflow through Dagster with dagster-graphbook's Ray executor:
    the ``options(num_gpus=1)`` step a Ray job holding one of the cluster's GPUs, the step
    marked by an empty ``options()`` a Ray job too, and the source, which asks the cluster for
    nothing, in a process forked beside the run worker (the program's process), no Ray job."""
    import time

    import psutil

    from dagster_graphbook.integrations.beside import BESIDE_META

    program = tmp_path / "ray_app.py"
    text = GRAPHBOOK_RAY_PROGRAM.replace("{address}", ray_cluster)
    text = text.replace("\n\ng = gb.Graph()\n", MARKED_STEP, 1)
    text = text.replace(
        "    model.bind(numbers)", "    model.bind(numbers)\n    g.step(tally).bind(numbers)"
    )
    program.write_text(text)
    env = {**os.environ, "DAGSTER_HOME": dagster_home, "PYTHONPATH": str(REPO)}
    forked: Dict[int, List[int]] = {}  # the program's children: its forkserver's, a step's
    with subprocess.Popen(
        [sys.executable, str(program)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            out = pool.submit(proc.communicate, timeout=240)
            while proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    for child in psutil.Process(proc.pid).children(recursive=True):
                        forked.setdefault(child.pid, [p.pid for p in child.parents()])
                time.sleep(0.05)
            stdout, stderr = out.result()
    assert proc.returncode == 0, stderr[-3000:]
    assert "succeeded" in stdout
    wdefs = build_workflow(GraphbookWorkflow(str(program)))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        (record,) = instance.get_run_records()
        run_id = record.dagster_run.run_id
        notes = _load_notes(run_id, wdefs, GraphbookTranslator(), instance)
        where = _where_steps_ran(instance, run_id)
    assert [n["y"] for n in notes["Predict"]["out"]] == [0, 10, 20]
    assert {n["predict_gpus"] for n in notes["Predict"]["out"]} <= {"0", "1", "2", "3"}  # one of 4
    assert {n["source_gpus"] for n in notes["Numbers"]["out"]} <= {None, ""}  # none asked for
    # the GPU step and the marked one ran as Ray jobs of the cluster, the source as none
    jobs = {s: m["Ray Submission ID"] for s, m in where.items() if "Ray Submission ID" in m}
    assert _ended_ray_jobs(ray_cluster, run_id) == dict.fromkeys(jobs, "SUCCEEDED")
    assert set(jobs) == {"ray_app__Predict", "ray_app__Tally"}
    assert {n["predict_ray_job"] for n in notes["Predict"]["out"]} == {True}
    assert {n["tally_ray_job"] for n in notes["Tally"]["out"]} == {True}
    # the source: forked beside the run worker, a descendant of the program's process
    numbers = where["ray_app__Numbers"]
    assert "Ray Submission ID" not in numbers
    assert numbers[BESIDE_META].endswith(f"run worker pid {proc.pid}"), numbers
    (pid,) = {n["pid"] for n in notes["Numbers"]["out"]}
    assert numbers["pid"] == str(pid)
    assert {n["ray_job"] for n in notes["Numbers"]["out"]} == {False}
    assert proc.pid in forked.get(pid, []), forked


def _ray_jobs(address: str, run_id: Optional[str] = None) -> Dict[str, str]:
    """Each Ray job of the cluster that ran a step (of run ``run_id``): step key -> status."""
    from ray.job_submission import JobSubmissionClient

    return {
        j.metadata["dagster/op"]: str(j.status)
        for j in JobSubmissionClient(address).list_jobs()
        if "dagster/op" in j.metadata and run_id in (None, j.metadata.get("dagster/run-id"))
    }


def _ended_ray_jobs(address: str, run_id: str, within_s: float = 60) -> Dict[str, str]:
    """``_ray_jobs`` once none of the run's is PENDING or RUNNING. A step's Ray job ends a moment
    after Dagster records the step's success (its driver still exits), more so on a busy box."""
    import time

    deadline = time.monotonic() + within_s
    while True:
        jobs = _ray_jobs(address, run_id)
        if not {"PENDING", "RUNNING"} & set(jobs.values()):
            return jobs
        assert time.monotonic() < deadline, f"Ray jobs still running {within_s} s after: {jobs}"
        time.sleep(0.2)


@ON_RAY  # its own Ray head: not beside the module's on another worker
def test_a_step_asking_for_gpus_a_cluster_without_them_cannot_give_fails_at_once(
    tmp_path, dagster_home
):
    """The Graphbook Ray program (``options(num_gpus=1)`` on Predict) against a head started
    with ``--num-gpus=0`` and no autoscaler: it hung after STEP_WORKER_STARTING, its Ray job
    PENDING. Now Predict fails at once naming what it asked for and what the cluster has, and no
    Ray job is left for it; the run is FAILURE."""
    with _ray_head(0) as address:
        program = tmp_path / "ray_app.py"
        program.write_text(GRAPHBOOK_RAY_PROGRAM.replace("{address}", address))
        env = {**os.environ, "DAGSTER_HOME": dagster_home, "PYTHONPATH": str(REPO)}
        done = subprocess.run(  # Ray itself gives up on a PENDING job after 900 s
            [sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=300
        )
        jobs = _ray_jobs(address)
    assert done.returncode != 0
    said = done.stderr
    assert "job ray_app, step ray_app__Predict: its Ray job asks for GPU 1" in said, said[-3000:]
    assert "CPU 2, memory" in said  # what the cluster's one node has
    assert "no autoscaler" in said and "not submitted" in said
    assert jobs == {}  # none for Predict: nothing left pending (Numbers ran beside the run worker)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        (record,) = instance.get_run_records()
        run_id = record.dagster_run.run_id
        failed = instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.STEP_FAILURE
        ).records
    assert record.dagster_run.status == dg.DagsterRunStatus.FAILURE
    assert [r.event_log_entry.step_key for r in failed] == ["ray_app__Predict"]


@ON_RAY
def test_a_step_whose_ray_job_waits_past_the_placement_timeout_fails_and_its_job_stops(
    ray_cluster, tmp_path, dagster_home
):
    """Every GPU of the cluster held by another job: Predict's job could be placed later, so it
    is submitted; PENDING past ``placement_timeout_s`` it is stopped and the step fails saying
    so. Once the GPUs are free the stopped job ends without running the step."""
    import time

    from ray.job_submission import JobStatus, JobSubmissionClient

    from dagster_graphbook.authoring.ray_api import RAY_EXECUTOR_PATH

    client = JobSubmissionClient(ray_cluster)
    holder = client.submit_job(entrypoint="sleep 600", entrypoint_num_gpus=4)
    try:
        deadline = time.monotonic() + 120
        while client.get_job_status(holder) != JobStatus.RUNNING:
            assert time.monotonic() < deadline, client.get_job_info(holder)
            time.sleep(1)
        program = tmp_path / "ray_app.py"
        program.write_text(GRAPHBOOK_RAY_PROGRAM.replace("{address}", ray_cluster))
        run = run_workflow(
            str(program),
            executor=RAY_EXECUTOR_PATH,
            executor_config={"ray": {"address": ray_cluster}, "placement_timeout_s": 5.0},
            dagster_home=dagster_home,
        )
    finally:
        client.stop_job(holder)
    assert not run.success
    assert "job ray_app, step ray_app__Predict: its Ray job" in run.failure, run.failure
    assert "not placed within placement_timeout_s 5 s (it asks for GPU 1" in run.failure
    assert "it was stopped" in run.failure
    deadline = time.monotonic() + 180  # placed once the GPUs are free, then stopped
    while _ray_jobs(ray_cluster, run.run_id).get("ray_app__Predict") in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, _ray_jobs(ray_cluster, run.run_id)
        time.sleep(2)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        started = instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.STEP_START
        ).records
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
    assert [r.event_log_entry.step_key for r in started] == ["ray_app__Numbers"]


@ON_RAY
def test_a_program_killed_while_its_step_waits_for_gpus_leaves_its_run_failed(
    ray_cluster, tmp_path, dagster_home
):
    """The Graphbook Ray program killed (-9) while Predict's job waits for the GPUs another job
    holds: its run stayed STARTED for ever. Now the process held the run's owner lock, so the
    next run's sweep marks it failed; once the GPUs are free the job ends without the step."""
    import time

    from ray.job_submission import JobStatus, JobSubmissionClient

    from dagster_graphbook.execution.ownership.dead_runs import fail_dead_runs

    client = JobSubmissionClient(ray_cluster)
    holder = client.submit_job(entrypoint="sleep 600", entrypoint_num_gpus=4)
    try:
        deadline = time.monotonic() + 120
        while client.get_job_status(holder) != JobStatus.RUNNING:
            assert time.monotonic() < deadline, client.get_job_info(holder)
            time.sleep(1)
        program = tmp_path / "ray_app.py"
        program.write_text(GRAPHBOOK_RAY_PROGRAM.replace("{address}", ray_cluster))
        env = {**os.environ, "DAGSTER_HOME": dagster_home, "PYTHONPATH": str(REPO)}
        with open(tmp_path / "stderr.txt", "w") as err:
            proc = subprocess.Popen([sys.executable, str(program)], env=env, stderr=err)
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            run_id = None
            while run_id is None or "ray_app__Predict" not in _ray_jobs(ray_cluster, run_id):
                assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-3000:]
                assert time.monotonic() < deadline + 120, "Predict's job was never submitted"
                records = instance.get_run_records()
                run_id = records[0].dagster_run.run_id if records else None
                time.sleep(1)
            assert _ray_jobs(ray_cluster, run_id)["ray_app__Predict"] == "PENDING"
            proc.kill()
            proc.wait()
            assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
            assert fail_dead_runs(instance) == [run_id]  # what the next run does first
            assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    finally:
        client.stop_job(holder)
    deadline = time.monotonic() + 180  # placed once the GPUs are free: the run has ended
    while _ray_jobs(ray_cluster, run_id).get("ray_app__Predict") in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, _ray_jobs(ray_cluster, run_id)
        time.sleep(2)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        started = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_START)
    assert [r.event_log_entry.step_key for r in started.records] == ["ray_app__Numbers"]


# A step that says it started, then waits for a file: killed with its Ray head in the first run,
# it ends at once when resumed
HOLDING_PROGRAM = """
import os
import time

import graphbook as gb
from graphbook import steps
from graphbook.ray import options


class Numbers(steps.GeneratorSourceStep):
    RequiresInput = False
    Outputs = ["out"]

    def load(self):
        yield {"out": {"i": 0}}


@gb.step("Wait/Hold")
@options()  # asks for nothing: a Ray job all the same (else it would run beside the run worker)
def hold(ctx, data):
    open("{folder}/started", "w").close()
    while not os.path.exists("{folder}/go"):
        time.sleep(0.2)
    data["held"] = True


g = gb.Graph()


@g()
def _():
    held = g.step(hold)
    held.bind(g.step(Numbers))
"""

# run_workflow on dagster-graphbook's Ray executor in a process of its own (killable when it
# hangs): argv program, DAGSTER_HOME, job server address, the run to resume ("" for none)
RUN_ON_RAY = """
import json
import sys

from dagster_graphbook import run_workflow
from dagster_graphbook.authoring.ray_api import RAY_EXECUTOR_PATH

program, home, address, resume = sys.argv[1:5]
run = run_workflow(
    program,
    executor=RAY_EXECUTOR_PATH,
    executor_config={
        "ray": {"address": address},
        "head_lost_timeout_s": 5.0,
        "health_check_interval_s": 2,
    },
    dagster_home=home,
    from_failure=resume or None,
)
print(json.dumps({"run_id": run.run_id, "failure": run.failure, "notes": run.notes}))
"""
# the run ends within head_lost_timeout_s (5) plus two of the executor's health checks (2 s
# apart: the first to find the head gone, the one past the timeout), and a margin for the run's
# end under a loaded suite (measured with checks 20 s apart: 33 s from the kill to the exit)
HEAD_LOST_BOUND_S = 5 + 2 * 2 + 25


@ON_RAY  # Ray heads of its own: one killed, one started at its addresses
def test_a_run_whose_ray_head_dies_mid_step_fails_naming_it_and_resumes_once_it_is_back(
    tmp_path, dagster_home
):
    """The Ray head SIGKILLed while a step's Ray job runs: the run stayed STARTED for ever (the
    executor logged "Error while checking health" every 20 s). Now its step fails once the head
    has not answered for ``head_lost_timeout_s``, naming the head's address and the resume; a
    head started again at that address runs the resumed run to success."""
    import time

    from tests.e2e.production_parts import PartUnavailable, ray_node

    program = tmp_path / "holding.py"
    program.write_text(HOLDING_PROGRAM.replace("{folder}", str(tmp_path)))
    env = {**os.environ, "DAGSTER_HOME": dagster_home, "PYTHONPATH": str(REPO)}

    def run_on(address: str, resume: str = "", **popen: Any) -> subprocess.Popen:
        argv = [sys.executable, "-c", RUN_ON_RAY, str(program), dagster_home, address, resume]
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, **popen)

    try:
        with ray_node(0) as head:
            assert head.dashboard is not None
            with open(tmp_path / "first.err", "w") as err:
                first = run_on(head.dashboard, stderr=err)
            try:
                deadline = time.monotonic() + 180
                while not (tmp_path / "started").exists():  # Hold's Ray job runs
                    assert first.poll() is None, (tmp_path / "first.err").read_text()[-3000:]
                    assert time.monotonic() < deadline, "Hold never started"
                    time.sleep(0.2)
                head.kill()
                killed = time.monotonic()
                out, _ = first.communicate(timeout=HEAD_LOST_BOUND_S)
                ended_s = time.monotonic() - killed
            finally:
                if first.poll() is None:  # hung: the run never ended
                    first.kill()
                    first.wait()
            failed = json.loads(out.splitlines()[-1])
            with dg.DagsterInstance.from_config(dagster_home) as instance:
                run = instance.get_run_by_id(failed["run_id"])
                assert run is not None and run.status == dg.DagsterRunStatus.FAILURE
            (tmp_path / "go").touch()
            with ray_node(0, at=head):
                resumed = run_on(head.dashboard, failed["run_id"], stderr=subprocess.PIPE)
                out, err = resumed.communicate(timeout=300)
    except PartUnavailable as exc:
        pytest.skip(str(exc))
    failure = failed["failure"]
    assert f"the Ray head at {head.dashboard} has not answered for" in failure, failure
    assert "head_lost_timeout_s 5 s" in failure
    assert f"--from-failure {failed['run_id']}" in failure
    assert ended_s < HEAD_LOST_BOUND_S
    assert resumed.returncode == 0, err[-3000:]
    done = json.loads(out.splitlines()[-1])
    assert done["failure"] is None
    assert done["notes"]["Hold"]["out"] == [{"i": 0, "held": True}]


class _StepGpus:
    """Which GPUs Ray gave each step's process, read from this machine's processes while runs go
    on: a Ray job's entrypoint (dagster-ray's ``dagster api execute_step``) is started with its
    job's config in ``RAY_JOB_CONFIG_JSON_ENV_VAR`` (dagster-ray's metadata: the run id and the
    step key) and, for a job holding GPUs, Ray's ``CUDA_VISIBLE_DEVICES``. ``seen``: (run id,
    step key) -> the GPU ids its processes were started with; ``together``: the steps running at
    the same instant, as each poll found them."""

    def __init__(self) -> None:
        import threading

        self.seen: Dict[Tuple[str, str], Set[Optional[str]]] = {}
        self.together: List[Dict[Tuple[str, str], Optional[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _StepGpus:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set():
            now: Dict[Tuple[str, str], Optional[str]] = {}
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes()
                except OSError:  # ended, or not ours
                    continue
                if b"RAY_JOB_CONFIG_JSON_ENV_VAR=" not in environ:
                    continue
                env = dict(
                    e.decode(errors="replace").split("=", 1)
                    for e in environ.split(b"\0")
                    if b"=" in e
                )
                meta = json.loads(env["RAY_JOB_CONFIG_JSON_ENV_VAR"]).get("metadata") or {}
                if "dagster/op" in meta:
                    step = (meta["dagster/run-id"], meta["dagster/op"])
                    now[step] = env.get("CUDA_VISIBLE_DEVICES")
            for step, gpus in now.items():
                self.seen.setdefault(step, set()).add(gpus)
            self.together.append(now)
            self._stop.wait(0.2)  # a step's process lives seconds

    def of_run(self, run_id: str) -> Tuple[Dict[str, Set[Optional[str]]], List[Dict[str, Any]]]:
        """``seen`` and ``together`` of the run ``run_id``, by step key."""
        seen = {step: gpus for (run, step), gpus in self.seen.items() if run == run_id}
        together = [{k[1]: v for k, v in now.items() if k[0] == run_id} for now in self.together]
        return seen, together


@ON_RAY
def test_nightly_classify_in_4_shards_on_ray_gives_the_unsharded_results(
    project, ray_cluster, tmp_path, run_wf, monkeypatch
):
    """The nightly demo with ``ClassifyShapes`` in 4 shards, ``gpus={"ClassifyShapes": 1}``, on
    dagster-ray's executor: each shard a Ray job holding one of the head's 4 logical
    GPUs, shards running at once on different GPUs; the notes of every pin, the Parquet rows,
    the files written and ClassifyShapes's figures as the unsharded job's in one process.

    The job is partitioned by day and the run is a day's, its folders absolute paths with
    ``{partition_key}`` (dagster-dask failed on partitioned runs: Ray's partitioned day, beside
    ``test_nightly_partition_on_a_cluster``'s on Dask).

    64 images in batches of 16 make 4 shards of one batch each, the unsharded run's batches (a
    batch of other images changes the CNN's last bits, docs/sharding.md).

    ClassifyShapes runs incremental (its launchpad's setting): each shard records its notes in
    the store, and a later incremental run in one process reuses every one of them."""

    # the run's executor (in this process) looks for ended steps every 0.2 s, not every 1 s
    monkeypatch.setenv("DAGSTER_STEP_DELEGATING_EXECUTOR_SLEEP_SECONDS", "0.2")
    images, shards, day = 64, 4, "2026-04-01"
    folder = _shapes_data().make_day(tmp_path / "incoming", day, images)
    out = tmp_path / "outputs"
    params = {  # the day's folders, as the runs in one process below name them
        "IncomingImages.folder": str(folder),
        "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
        "SaveResized.output_dir": str(out / day),
        "ClassifyShapes.batch_size": images // shards,
    }
    on_ray = {  # as the partitioned job's launchpad names them for every day
        **params,
        "IncomingImages.folder": f"{tmp_path}/incoming/{{partition_key}}",
        "SaveResized.output_dir": f"{out}/{{partition_key}}",
        "ClassifyShapes.runtime.incremental": True,
    }
    source, nodes = NIGHTLY
    notes_dir = str(tmp_path / "notes")
    wdefs = build_workflow(GraphbookWorkflow(source, custom_nodes=list(nodes)))
    recon = dg.build_reconstructable_job(
        "tests.e2e.distributed_jobs",
        "sharded_job",
        reconstructable_args=(ray_cluster, source, nodes, notes_dir, shards, True),
    )
    home = str(tmp_path / "ray_home")
    os.makedirs(home)
    with _StepGpus() as gpus, dg.DagsterInstance.from_config(home) as instance:
        result = dg.execute_job(
            recon,
            instance=instance,
            run_config=run_config_for(wdefs.workflow, on_ray),
            tags={"dagster/partition": day},
            raise_on_error=False,
        )
        assert result.success, _failure_message(instance, result.run_id)
        notes = _load_notes(result.run_id, wdefs, GraphbookTranslator(), instance)
        started = instance.get_records_for_run(
            result.run_id, of_type=dg.DagsterEventType.STEP_WORKER_STARTING
        ).records
        run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags["dagster/partition"] == day
    jobs = {  # step -> its Ray job
        r.event_log_entry.step_key: r.event_log_entry.dagster_event.event_specific_data.metadata[
            "Ray Submission ID"
        ].value
        for r in started
    }
    meta, _ = _recorded(home, result.run_id)
    files = _files(out)
    assert files and all(name.startswith(f"{day}/") for name in files)  # {partition_key} filled
    shutil.rmtree(out)

    whole = run_wf(source, nodes, params, notes_dir=notes_dir)  # unsharded, in one process
    assert whole.success, whole.failure
    assert whole.dagster_home is not None
    whole_meta, _ = _recorded(whole.dagster_home, whole.run_id)

    shard_steps = sorted(k for k in jobs if "__shard[" in k)
    assert shard_steps == [
        f"nightly_shapes__ClassifyShapes.nightly_shapes__ClassifyShapes__shard[shard_{i}]"
        for i in range(shards)
    ]
    # each step its own Ray job of the cluster, each shard one of its own
    assert _ended_ray_jobs(ray_cluster, result.run_id) == dict.fromkeys(jobs, "SUCCEEDED")
    assert len(set(jobs.values())) == len(jobs)
    # the GPU id Ray gave each shard's process (Ray sets CUDA_VISIBLE_DEVICES for a job holding
    # GPUs only), one each; the other steps' jobs hold none; never one GPU to two running shards
    seen, together = gpus.of_run(result.run_id)
    given = {step: seen.get(step) for step in jobs}
    for step in shard_steps:  # one id of the 4, the same in each of its processes
        assert given[step] is not None and len(given[step]) == 1, given
        assert given[step] <= {"0", "1", "2", "3"}, given
    assert all(given[s] in (None, {None}) for s in jobs if s not in shard_steps), given
    concurrent = [[now[s] for s in shard_steps if s in now] for now in together]
    assert max(map(len, concurrent)) >= 2  # shards did run at once
    assert all(len(set(ids)) == len(ids) for ids in concurrent), concurrent

    assert notes == whole.notes  # every step's pins: same notes, same order
    assert len(notes["ClassifyShapes"]["out"]) == images
    assert files == _files(out) and len(files) == len(notes["SaveResized"]["out"]) > 0
    tables = sorted(k for k, m in whole_meta.items() if "table_path" in m)  # the sink tables
    assert tables == ["nightly_shapes/ReviewSplit/review", "nightly_shapes/SaveResized"]
    for key in tables:
        pd.testing.assert_frame_equal(
            pd.read_parquet(meta[key]["table_path"]), pd.read_parquet(whole_meta[key]["table_path"])
        )
    key = "nightly_shapes/ClassifyShapes"
    figures = {k: v for k, v in whole_meta[key].items() if k not in TIMINGS}
    assert {k: meta[key].get(k) for k in figures} == figures
    assert figures["accuracy"] >= 0.9 and meta[key]["details"]["shards"] == shards
    assert (meta[key]["notes_computed"], meta[key]["notes_reused"]) == (images, 0)

    # the shards' records (written on the cluster's nodes) serve an incremental run of the same
    # day here (records are kept by day)
    daily = GraphbookWorkflow(
        source,
        custom_nodes=list(nodes),
        partitions_def=distributed_jobs.DAILY,  # the Ray run's days
        runtime={"incremental": True},
        notes_dir=notes_dir,
    )
    again = run_wf(daily, params=on_ray, partition_key=day)
    assert again.success, again.failure
    assert again.dagster_home is not None
    again_meta, _ = _recorded(again.dagster_home, again.run_id)
    assert (again_meta[key]["notes_computed"], again_meta[key]["notes_reused"]) == (0, images)
    assert again_meta[key]["reused_from"] == {result.run_id: images}
    assert again.notes == whole.notes


@ON_RAY
def test_materialize_and_its_resume_run_a_ray_jobs_steps_as_ray_jobs(
    ray_cluster, tmp_path, dagster_home
):
    """A code location whose job runs on the Ray executor: ``materialize`` submits each step as a
    Ray job of the cluster (it ran them in its own process, no Ray job at all), and
    ``--from-failure`` runs the failed step as a Ray job again, only that one. Its steps ask for
    nothing: ``light_steps_on_cluster`` sends them to the cluster all the same."""
    address = ray_cluster
    executor = (
        "__import__('dagster_graphbook.integrations.ray', fromlist=['ray_executor'])"
        f".ray_executor.configured({{'ray': {{'address': {address!r}, 'env_vars': "
        f"['PYTHONPATH={tmp_path}{os.pathsep}{REPO}', 'CHECK_DIR={tmp_path}']}}, "
        "'light_steps_on_cluster': True})"
    )
    env = cli_project(tmp_path, executor)
    (tmp_path / "fail_check").write_text("")
    failed = cli_materialize(tmp_path, env, dagster_home, "--no-progress")
    said = failed.stdout + failed.stderr
    assert failed.returncode == 1, said
    first = cli_run_id(failed.stdout)
    # each step a Ray job (a step that fails still ends its job's `dagster api` process well)
    assert set(_ray_jobs(address, first)) == {"pids__Numbers", "pids__Check"}, said
    assert "job pids: steps run on the job's executor 'ray'" in failed.stderr, said

    (tmp_path / "fail_check").unlink()
    resumed = cli_materialize(tmp_path, env, dagster_home, "--no-progress", "--from-failure", first)
    said = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, said
    assert "steps run on the job's executor 'ray'" in resumed.stderr, said
    second = cli_run_id(resumed.stdout)
    assert _ended_ray_jobs(address, second) == {"pids__Check": "SUCCEEDED"}, said
    notes = cli_notes(dagster_home, second)
    assert [n["n"] for n in notes] == [0, 1, 2]
    assert all(n["check_pid"] != os.getpid() for n in notes)
