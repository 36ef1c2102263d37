"""Streaming segments: some steps of a workflow stream as one op, the others keep an op each.

Real Dagster runs with real loader and dump processes, on the workflows of
``tests/execution/test_stream.py``: what the segment reads from outside comes in through the notes
IO manager, what a step outside reads is stored, what only the segment reads is not, and the notes
equal the default mode's.
"""

from __future__ import annotations

import textwrap

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from dagster_graphbook.model.workflow import WorkflowError
from tests.execution.test_stream import _dfs_workflow, _lines
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

CPU = {"LoadImages.runtime.num_workers": 2, "LoadImages.runtime.device": "cpu"}


@pytest.fixture
def nodes(tmp_path):
    return copy_nodes(tmp_path / "nodes", "stream_nodes.py", "streamed_steps")


def _images_then_mark(folder, trace, n):
    """Numbers -> LoadImages -> Reduce -> Mark (a step after the segment)."""
    nodes = [
        step_node("src", "Numbers", {"n": n, "trace": str(trace)}, source=True),
        step_node("load", "LoadImages", {"batch_size": 8, "item_key": "paths"}, label="LoadImages"),
        step_node("reduce", "Reduce", {"trace": str(trace)}, label="Reduce"),
        step_node("after", "Mark", {"trace": str(trace)}, label="After"),
    ]
    edges = [
        edge("src", "out", "load"),
        edge("load", "out", "reduce"),
        edge("reduce", "out", "after"),
    ]
    return write_workflow(folder, "images", nodes, edges)


def _ops(defs: dg.Definitions) -> dict:
    """asset key -> the op that materializes it."""
    graph = defs.resolve_asset_graph()
    return {k: graph.get(k).assets_def.op.name for k in graph.get_all_asset_keys()}


def _materializations(home: str, run_id: str) -> dict:
    with dg.DagsterInstance.from_config(home) as instance:
        out = {}
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            m = record.asset_materialization
            out[m.asset_key] = {k: v.value for k, v in m.metadata.items()}
        return out


def test_segment_streams_its_steps_and_stores_what_other_ops_read(
    tmp_path, nodes, run_wf, dagster_home
):
    wf = _images_then_mark(tmp_path, tmp_path / "trace.txt", 20)
    segment = ["LoadImages", "Reduce"]
    defs = build_definitions([GraphbookWorkflow(wf, custom_nodes=[nodes], streaming=segment)])
    key = lambda step: dg.AssetKey(["images", step])  # noqa: E731
    assert _ops(defs) == {
        key("Numbers"): "images__Numbers",
        key("LoadImages"): "images__stream",
        key("Reduce"): "images__stream",
        key("After"): "images__After",
    }
    # the asset graph is the default mode's: every pin, every edge
    plain = build_definitions([GraphbookWorkflow(wf, custom_nodes=[nodes])])
    parents = lambda d: {  # noqa: E731
        k: set(d.resolve_asset_graph().get(k).parent_keys)
        for k in d.resolve_asset_graph().get_all_asset_keys()
    }
    assert parents(defs) == parents(plain)

    run = run_wf(wf, [nodes], CPU, streaming=segment)
    assert run.success, run.failure
    default = run_wf(wf, [nodes], CPU)
    assert default.success, default.failure
    # LoadImages' tensors only ever go to Reduce inside the stream: not stored
    assert "out" not in run.notes["LoadImages"] and "out" in default.notes["LoadImages"]
    # Reduce's notes are read by After's op: stored, and equal to the default mode's
    assert run["Reduce"]["out"] == default["Reduce"]["out"]
    assert [n["mean"] for n in run["After"]["out"]] == [float(i) for i in range(20)]
    mats = _materializations(dagster_home, run.run_id)
    assert mats[key("LoadImages")]["stored"] is False
    assert mats[key("LoadImages")]["dagster/row_count"] == 20
    assert mats[key("Reduce")]["stored"] is True and "dagster/uri" in mats[key("Reduce")]


def test_segment_reads_notes_from_outside_in_graphbooks_order(tmp_path, nodes, run_wf):
    """Numbers -> A -> B -> C and A -> C with B and C streamed: A's stored notes enter the
    stream one at a time and go depth-first to B (then C through B) and to C."""
    trace = tmp_path / "trace.txt"
    wf = _dfs_workflow(tmp_path, trace, n=3)
    run = run_wf(wf, [nodes], streaming=["B", "C"])
    assert run.success, run.failure
    expected = [f"src {i}" for i in range(3)] + [f"A {i}" for i in range(3)]
    for i in range(3):
        expected += [f"B {i}", f"C {i}", f"C {i}"]
    assert _lines(trace) == expected
    assert sorted(n["i"] for n in run["C"]["out"]) == [0, 0, 1, 1, 2, 2]
    assert "out" in run.notes["A"] and "out" not in run.notes["B"]  # B is read only by C


def test_params_reach_steps_inside_and_outside_the_segment(tmp_path, nodes, run_wf):
    wf = _dfs_workflow(tmp_path, tmp_path / "trace.txt", n=4)
    run = run_wf(wf, [nodes], {"A.delay": 0.0, "B.fail_at": 2}, streaming=["B", "C"])
    assert not run.success
    assert "workflow 'dfs', step 'B' (node B): failed on note 2" in run.failure
    outside = run_wf(wf, [nodes], {"A.fail_at": 1}, streaming=["B", "C"])
    assert not outside.success and "step 'A' (node A): failed on note 1" in outside.failure


@pytest.mark.parametrize(
    "segment, said",
    [
        (["A", "Nope"], "streaming names ['Nope'], not steps of the workflow (steps: "),
        (
            ["A", "C"],
            "step 'B' (node B) is outside the segment but reads from step 'A' (node A) and feeds "
            "step 'C' (node C) inside it; add it to the segment",
        ),
        (["Numbers", "B"], "steps 'B' (node B) are not connected to step 'Numbers' (node src)"),
    ],
    ids=["unknown", "re-entered", "disconnected"],
)
def test_a_segment_that_cannot_stream_fails_at_load(tmp_path, nodes, segment, said):
    wf = _dfs_workflow(tmp_path, tmp_path / "trace.txt")
    with pytest.raises(WorkflowError) as exc:
        build_definitions(
            [GraphbookWorkflow(wf, custom_nodes=[nodes], streaming=segment)], strict=True
        )
    assert "dfs.json" in str(exc.value) and said in str(exc.value)


DEFS = """
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    spec = GraphbookWorkflow({wf!r}, custom_nodes=[{nodes!r}], streaming=["B", "C"],
                             executor="in_process")
    defs = build_definitions([spec])
    """


def test_yaml_cli_and_materialize_take_a_segment(tmp_path, nodes, dagster_home, monkeypatch):
    from dagster_graphbook.cli.main import main
    from dagster_graphbook.defs.component.component import GraphbookWorkflowComponent
    from dagster_graphbook.runner.run import run_job

    wf = _dfs_workflow(tmp_path, tmp_path / "trace.txt", n=2)
    component = GraphbookWorkflowComponent(
        workflow=str(wf), custom_nodes=[str(nodes)], streaming=["B", "C"]
    )
    assert component.workflow_spec(tmp_path).streaming == ["B", "C"]
    args = ["run", str(wf), "--custom-nodes", str(nodes), "--stream-steps", "B,C"]
    assert main([*args, "--no-progress", "--dagster-home", dagster_home]) == 0
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        (run,) = instance.get_runs()
        steps = {e.step_key for e in instance.all_logs(run.run_id) if e.step_key}
        assert steps == {"dfs__Numbers", "dfs__A", "dfs__stream"}
        (tmp_path / "segment_defs.py").write_text(
            textwrap.dedent(DEFS.format(wf=str(wf), nodes=str(nodes)))
        )
        monkeypatch.chdir(tmp_path)
        failed = run_job("dfs", {"C.fail_at": 1}, module="segment_defs", instance=instance)
        assert not failed.success and "step 'C' (node C): failed on note" in failed.failure
        outside = run_job("dfs", {"A.fail_at": 0}, module="segment_defs", instance=instance)
        assert not outside.success and "step 'A' (node A): failed on note 0" in outside.failure


def test_checks_stay_on_steps_outside_the_segment(tmp_path, nodes, run_wf):
    from dagster_graphbook import StepCheck

    wf = _dfs_workflow(tmp_path, tmp_path / "trace.txt", n=2)
    check = StepCheck(step="A", metric="row_count", min=1)
    defs = build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes], streaming=["B", "C"], checks=[check])],
        strict=True,
    )
    (spec,) = defs.resolve_asset_graph().get(dg.AssetKey(["dfs", "A"])).assets_def.check_specs
    assert spec.asset_key == dg.AssetKey(["dfs", "A"])
    on_b = StepCheck(step="B", metric="row_count", min=1)
    with pytest.raises(WorkflowError, match=r"asset checks on streamed steps \(B\)"):
        build_definitions(
            [GraphbookWorkflow(wf, custom_nodes=[nodes], streaming=["B", "C"], checks=[on_b])],
            strict=True,
        )
