"""User code that exits, and notes that cannot be stored: named, not a worker death."""

from __future__ import annotations

import sys

import pytest

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.plan.settings import BatchRuntime
from tests.support.nodes import copy_nodes
from tests.support.workflows import chain_workflow, step_node, write_workflow


class Exits(BatchStep):
    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        if item == "bad.png":
            sys.exit(3)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_sys_exit_in_load_fn_is_an_item_error_naming_the_item(worker_type):
    notes = [{"items": ["a.png", "bad.png", "c.png"]}]
    settings = BatchRuntime(
        num_workers=2,
        worker_type=worker_type,
        device="cpu",
        on_item_error="skip",
        stall_warning_s=0,
    )
    result = run_batch_step(Exits(), notes, settings, label="step 'Exits'")
    [error] = result.errors
    assert error.stage == "load_fn" and "bad.png" in error.item and error.item_index == 1
    assert "load_fn called sys.exit(3)" in error.headline()
    assert result.outputs["out"][0]["graphbook_lost_items"] == [1]


def test_a_note_that_cannot_be_pickled_names_the_step_pin_note_and_key(tmp_path, run_wf):
    nodes = copy_nodes(tmp_path / "nodes", "locky.py", "exit_steps")
    wf = write_workflow(tmp_path, "locky", [step_node("0", "Locky", {}, source=True)], [])
    run = run_wf(wf, [nodes], notes_dir=str(tmp_path / "notes"))
    assert not run.success
    assert "locky/Locky: note 1, key 'lock' (lock) cannot be stored" in run.failure
    assert not [
        p for p in (tmp_path / "notes").rglob("*") if p.is_file()
    ]  # nothing half-written left


def test_a_workflow_too_deep_for_dagster_is_refused_at_validate_time(tmp_path):
    """11.9: a 2,000-step chain validated, then failed to build with RecursionError."""
    from dagster_graphbook import GraphbookWorkflow, WorkflowError
    from dagster_graphbook.defs.definitions import build_workflow

    nodes = copy_nodes(tmp_path / "nodes", "chain.py", "chain")
    wf = _chain(tmp_path, 1002)
    with pytest.raises(
        WorkflowError, match=r"(?s)chain\.json.*1002 steps deep \(ending at node 1001\)"
    ):
        build_workflow(GraphbookWorkflow(wf, custom_nodes=[nodes]))


def test_a_chain_as_deep_as_allowed_builds_whichever_step_dagster_visits_first(tmp_path):
    """A 1,000-step chain (the deepest allowed) failed to build about 1 time in 16 with
    RecursionError: Dagster's ``create_adjacency_lists`` recurses up the chain from whichever
    step its set order gives first. Here it is made to start from the last step, every time."""
    import subprocess
    import sys

    nodes = copy_nodes(tmp_path / "nodes", "chain.py", "chain")
    wf = _chain(tmp_path, 1000)
    script = f"""
from dagster._core.definitions.graph_definition import create_adjacency_lists
from dagster_graphbook import GraphbookWorkflow, build_definitions

defs = build_definitions([GraphbookWorkflow({str(wf)!r}, custom_nodes=[{str(nodes)!r}])],
                         strict=True)
graph = defs.resolve_job_def("chain").graph
step = lambda n: int(n.name.rsplit("Inc", 1)[1]) if "Inc" in n.name else 0
last_first = sorted(graph.nodes, key=step, reverse=True)
forward, _ = create_adjacency_lists(last_first, graph.dependency_structure)
print("built", len(forward))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0 and "built 1000" in out.stdout, out.stderr[-2000:]


def _chain(folder, n: int):
    return chain_workflow(folder, n, "chain", labelled=True)
