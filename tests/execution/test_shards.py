"""Sharded batch steps (``dagster_graphbook/execution/op/shards.py``): a step's notes split into
shards, each its own Dagster step, merged by a commit step into the unsharded step's outputs.

Real runs are in process and small (tens of notes): the suite's CI budget is tight.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest

from dagster_graphbook import WorkflowError
from dagster_graphbook.execution.errors import StepFailure
from dagster_graphbook.execution.op.shards import (
    FIGURES_NOTE,
    ShardResult,
    check_complete,
    merge_figures,
    merge_shards,
    split,
)
from dagster_graphbook.execution.op.step_op import OpRun
from dagster_graphbook.execution.routing import PinNotes, StepResult
from dagster_graphbook.plan.settings import BatchRuntime
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow


@pytest.fixture
def nodes(tmp_path):
    return copy_nodes(tmp_path / "nodes", "shard_nodes.py", "shard_ops")


def _workflow(tmp_path, params=None, plain=False):
    steps = [step_node("0", "Numbers", {"n": 30}, source=True)]
    steps.append(step_node("1", "Parity", params or {}, outputs=["even", "odd"]))
    edges = [edge("0", "out", "1")]
    if plain:
        steps.append(step_node("2", "Plain", {}))
        edges.append(edge("0", "out", "2"))
    return write_workflow(tmp_path, "sharding", steps, edges)


FAST = {"Parity.runtime.num_workers": 0, "Parity.runtime.device": "cpu"}


def _row_counts(metadata):
    return {k: v.get("dagster/row_count") for k, v in metadata.items() if "Parity" in k}


def test_three_shards_give_the_unsharded_notes_in_order(tmp_path, nodes, run_wf):
    """30 notes in 3 shards: both pins hold the same notes in the same order as unsharded, the
    counts are summed, whole-number figures summed, the ratio from ``on_commit``."""
    wf = _workflow(tmp_path)
    whole = run_wf(wf, [nodes], FAST)
    assert whole.success, whole.failure
    sharded = run_wf(wf, [nodes], FAST, shards={"Parity": 3})
    assert sharded.success, sharded.failure
    for pin in ("even", "odd"):
        assert sharded["Parity"][pin] == whole["Parity"][pin]
        assert [n["i"] for n in sharded["Parity"][pin]] == [n["i"] for n in whole["Parity"][pin]]
    with dg.DagsterInstance.from_config(sharded.dagster_home) as instance:
        meta = _materializations(instance, sharded.run_id)
        unsharded = _materializations(instance, whole.run_id)
        steps = {
            e.step_key
            for e in instance.all_logs(sharded.run_id)
            if e.step_key and "Parity" in e.step_key
        }
    assert _row_counts(meta) == _row_counts(unsharded)
    assert len([k for k in steps if "shard[" in k]) == 3, steps
    for pin in ("even", "odd"):
        figures = meta[f"sharding/Parity/{pin}"]
        assert figures["dagster/row_count"] == 15
        assert figures["notes_in"] == 30
        assert figures["items"] == 60
        assert figures["correct"] == 20  # items 0..29 and 100..129 divisible by 3: 10 + 10
        assert figures["accuracy"] == pytest.approx(20 / 60)
        assert "ratio_without_hook" in figures[FIGURES_NOTE]


def _materializations(instance, run_id):
    out = {}
    for record in instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    ).records:
        m = record.event_log_entry.dagster_event.event_specific_data.materialization
        out[m.asset_key.to_user_string()] = {k: v.value for k, v in m.metadata.items()}
    return out


def test_a_failed_shard_is_retried_alone(tmp_path, nodes, run_wf):
    """Note 25's shard (the third of 3) fails on its first attempt; with one retry, it runs
    again alone: on_start ran 4 times, its notes twice, the other shards' once."""
    marks = tmp_path / "marks"
    marks.mkdir()
    wf = _workflow(tmp_path, {"marks": str(marks), "fail_at": 25})
    params = {**FAST, "Parity.runtime.retries": 1}
    run = run_wf(wf, [nodes], params, shards={"Parity": 3})
    assert run.success, run.failure
    assert (marks / "failed_once").exists()
    names = [p.name.rsplit("-", 1)[0] for p in marks.iterdir() if p.name != "failed_once"]
    assert names.count("start") == 4
    seen = {i: names.count(f"data-{i}") for i in range(30)}
    assert seen == {i: 2 if i >= 20 else 1 for i in range(30)}, seen
    assert len(run["Parity"]["even"]) + len(run["Parity"]["odd"]) == 30


def _result(index, count, start, notes):
    step = StepResult(
        {"out": PinNotes(notes, range(len(notes)))}, {"notes_in": len(notes), "seconds": 1.0}
    )
    return ShardResult(index, count, start, OpRun({"1": step}, {"1": {"n": len(notes)}}))


class _Plan:  # the StepPlan fields the merge reads
    label = "workflow 'w', step 'S' (node 1)"
    node_id = "1"
    pins = ("out",)


def test_the_commit_refuses_a_missing_shard():
    """Re-execution from failure after an interruption can hand the commit only the shards that
    finished: it must fail naming the missing one, not commit a partial result."""
    shards = [_result(0, 3, 0, [1, 2]), _result(2, 3, 4, [5])]
    with pytest.raises(StepFailure, match="shards 1 of 3 never arrived"):
        check_complete(_Plan(), shards)  # type: ignore[arg-type]
    with pytest.raises(StepFailure, match="no shard"):
        check_complete(_Plan(), [])  # type: ignore[arg-type]
    whole = check_complete(_Plan(), [shards[1], _result(1, 3, 2, [3, 4]), shards[0]])  # type: ignore[arg-type]
    merged = merge_shards(_Plan(), whole)  # type: ignore[arg-type]
    assert list(merged.results["1"].outputs["out"]) == [1, 2, 3, 4, 5]
    assert merged.results["1"].stats["notes_in"] == 5
    assert merged.figures["1"] == {"n": 5}


def test_split_is_contiguous_and_even():
    assert [len(p) for _, p in split(list(range(10)), BatchRuntime(shards=3))] == [4, 3, 3]
    assert [s for s, _ in split(list(range(10)), BatchRuntime(shard_size=4))] == [0, 4, 8]
    assert split([], BatchRuntime(shards=3)) == [(0, [])]  # one empty shard: the commit runs
    assert merge_figures([{"a": 1, "r": 0.5}, {"a": 2, "r": 0.7}])["a"] == 3


def test_sharding_is_refused_where_it_cannot_run(tmp_path, nodes, run_wf):
    """A sharded step in a streaming segment, or a step that is not a batch step."""
    wf = _workflow(tmp_path, plain=True)
    with pytest.raises(WorkflowError, match=r"step 'Parity'.*streaming"):
        run_wf(wf, [nodes], FAST, shards={"Parity": 2}, streaming=True)
    with pytest.raises(WorkflowError, match=r"step 'Plain'.*only batch steps"):
        run_wf(wf, [nodes], FAST, shards={"Plain": 2})
    with pytest.raises(WorkflowError, match="not in the workflow"):
        run_wf(wf, [nodes], FAST, shards={"Nope": 2})


def test_run_config_changes_how_many_shards_of_a_sharded_step_only(tmp_path, nodes, run_wf):
    """The launchpad path of the step's config is the unsharded one: ``runtime.shards`` of a
    step sharded 3 ways makes 2 shards; of a step defined as one op, it fails saying where."""
    wf = _workflow(tmp_path)
    run = run_wf(wf, [nodes], {**FAST, "Parity.runtime.shards": 2}, shards={"Parity": 3})
    assert run.success, run.failure
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        keys = {e.step_key for e in instance.all_logs(run.run_id) if e.step_key}
    assert len([k for k in keys if "shard[" in k]) == 2, keys
    assert len(run["Parity"]["even"]) == 15
    run = run_wf(wf, [nodes], {**FAST, "Parity.runtime.shards": 2})
    assert not run.success
    assert "defined as one op" in run.failure, run.failure


def _inner_ops(tmp_path, nodes, **options):
    """The plan, shard and commit ops of ``Parity`` sharded 3 ways, by their last name part."""
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    spec = GraphbookWorkflow(
        _workflow(tmp_path), custom_nodes=[nodes], shards={"Parity": 3}, **options
    )
    defs = build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)
    job = defs.resolve_job_def("sharding")
    graph = job.graph.node_named("sharding__Parity").definition
    return {node.name.rsplit("__", 1)[-1]: node.definition for node in graph.nodes}


def test_only_the_shard_ops_request_the_steps_gpus_and_pool(tmp_path, nodes):
    """Red-team finding F4: plan (splits a list) and commit (merges results) carried the step's
    GPU requests and pool, so each held a GPU pod, task or slot of its own. They keep the
    workflow's own executor settings (a k8s secret for the shared notes_dir), which the shard op
    gets beside its GPU limit."""
    secrets = {"container_config": {"env_from": [{"secret_ref": {"name": "notes-s3"}}]}}
    ops = _inner_ops(tmp_path, nodes, gpus={"Parity": 1}, op_tags={"dagster-k8s/config": secrets})
    k8s = json.loads(ops["shard"].tags["dagster-k8s/config"])  # Dagster keeps tags as JSON
    assert k8s["container_config"]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert k8s["container_config"]["env_from"] == secrets["container_config"]["env_from"]
    assert json.loads(ops["shard"].tags["dagster-ray/config"]) == {"num_gpus": 1}
    assert ops["shard"].pool == "gpu"
    for name in ("plan", "commit"):
        assert json.loads(ops[name].tags["dagster-k8s/config"]) == secrets, name
        gpu_tags = {"dagster-ray/config", "dagster-dask/resource_requirements"}
        assert gpu_tags.isdisjoint(ops[name].tags), (name, ops[name].tags)
        assert ops[name].pool is None, name
        assert "dagster_graphbook/steps" in ops[name].tags  # job readers still find the step
