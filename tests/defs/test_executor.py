"""The executor of workflow jobs and the notes stores its runs can use: a ``memory://`` notes_dir
lives in one process, so a job whose steps run in processes of their own is refused, at load for
the workflow's own executor and at the run's start for a run that picks multiprocess."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from dagster_graphbook.integrations.dask import dask_executor
from dagster_graphbook.model.workflow import WorkflowError
from tests.conftest import edge, step_node, write_nodes, write_workflow

NODES = """
from graphbook.steps import BatchStep, SourceStep


class Numbers(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"n": {"type": "number", "default": 6}}

    def __init__(self, n=6):
        super().__init__()
        self.n = int(n)

    def load(self):
        return {"out": [{"i": i, "items": [i]} for i in range(self.n)]}


class Tenfold(BatchStep):
    Outputs = ["out"]
    Parameters = {"batch_size": {"type": "number", "default": 2}}

    def __init__(self, batch_size=2):
        super().__init__(batch_size, "items")

    @staticmethod
    def load_fn(item):
        return item * 10

    def on_item_batch(self, outputs, items, notes):
        for note, out in zip(notes, outputs):
            note["tenfold"] = int(out)
"""
MEMORY = "memory://graphbook-notes"
ONE_PROCESS = {"Tenfold.runtime.num_workers": 0, "Tenfold.runtime.device": "cpu"}


@pytest.fixture
def flow(tmp_path: Path):
    """``(workflow file, custom nodes)``: Numbers -> Tenfold."""
    nodes = write_nodes(tmp_path / "nodes", "mem_nodes.py", NODES)
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
