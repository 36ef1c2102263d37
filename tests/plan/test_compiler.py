"""The plan compiler (dagster_graphbook/plan/plan.py): what ``compile_workflow`` and ``compile_op``
make of a small workflow (tests/nodes/small_pipeline.py: a source, a step bound to a resource, a
batch step) before any Dagster definition is built from it: the ops and their steps, the edges as
inputs, the launchpad settings, the resources, batch against plain steps, streaming, checks, and
the errors for input the compiler refuses, which name the workflow and the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, StepCheck, WorkflowError
from dagster_graphbook.defs.definitions import load
from dagster_graphbook.model.workflow import Workflow
from dagster_graphbook.plan.checks import SourceHasNotes
from dagster_graphbook.plan.options import WorkflowOptions
from dagster_graphbook.plan.plan import OpPlan, WorkflowPlan, compile_op, compile_workflow
from dagster_graphbook.plan.translator import GraphbookTranslator
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow

K = dg.AssetKey


def small(tmp_path: Path, *, reserved: bool = False, **options: Any) -> Workflow:
    """Numbers (node 1, n=4) -> Shift (node 2, scale=3, ``by`` bound to Offset, node 9) ->
    Total (node 3, a batch step); ``reserved`` adds Reserved (node 4) after Shift.
    ``options`` go to ``GraphbookWorkflow``."""
    nodes = copy_nodes(tmp_path / "nodes", "small_nodes.py", "small_pipeline")
    steps = [
        step_node("1", "Numbers", {"n": 4}, source=True),
        step_node("2", "Shift", {"scale": 3}),
        step_node("3", "Total"),
        resource_node("9", "Offset", {"value": 5}),
    ]
    edges = [edge("1", "out", "2"), edge("2", "out", "3"), edge("9", "resource", "2", "by")]
    if reserved:
        steps.append(step_node("4", "Reserved"))
        edges.append(edge("2", "out", "4"))
    path = write_workflow(tmp_path, "small", steps, edges)
    return load(GraphbookWorkflow(path, custom_nodes=[str(nodes)], **options))


# what compile_workflow takes besides the options: the options' checks bound to node ids, and the
# notes IO manager's metadata
BOUND = ("checks", "external_deps", "storage")


def compiled(workflow: Workflow, **kwargs: Any) -> WorkflowPlan:
    """``kwargs``: options (``WorkflowOptions``' fields) and ``BOUND`` arguments."""
    options = WorkflowOptions(**{k: v for k, v in kwargs.items() if k not in BOUND})
    bound = {k: v for k, v in kwargs.items() if k in BOUND}
    return compile_workflow(workflow, GraphbookTranslator(), options, **bound)


def op_named(plan: WorkflowPlan, name: str) -> OpPlan:
    [op] = [op for op in plan.ops if op.name == name]
    return op


def field_default(op: OpPlan, key: str, within: Optional[str] = None) -> Any:
    """The launchpad default of config field ``key`` (of the op's ``within`` field if given)."""
    config = op.asset_args["config_schema"]
    if within is not None:
        config = config[within].config_type.fields
    return config[key].default_value


def test_each_step_is_an_op_of_its_own_in_topological_order(tmp_path):
    plan = compiled(small(tmp_path))
    assert plan.segment == ()
    assert plan.names.job_name == "small"
    assert [op.name for op in plan.ops] == ["small__Numbers", "small__Shift", "small__Total"]
    for op, (node_id, step, kind) in zip(
        plan.ops, [("1", "Numbers", "source"), ("2", "Shift", "step"), ("3", "Total", "batch")]
    ):
        [only] = op.steps
        assert (only.node_id, only.step_name, only.kind, only.op_name) == (
            node_id,
            step,
            kind,
            f"small__{step}",
        )
        assert only.workflow == "small" and only.workflow_source.endswith("small.json")
        assert only.pins == ("out",)
        assert op.streamed is False and op.inlets == {}
        assert op.outputs == {(node_id, "out"): "out"}
        assert op.stored == {(node_id, "out")}  # every pin of a step op is stored
        assert op.asset_args["outs"]["out"].key == K(["small", step])
        assert op.asset_args["name"] == op.name and op.asset_args["can_subset"] is False


def test_edges_become_inputs_keyed_by_the_upstream_asset(tmp_path):
    plan = compiled(small(tmp_path))
    numbers, shift, total = plan.ops
    assert numbers.steps[0].input_names == () and numbers.asset_args["ins"] == {}
    assert shift.steps[0].input_names == ("in_0",)
    assert shift.asset_args["ins"]["in_0"].key == K(["small", "Numbers"])
    assert total.asset_args["ins"]["in_0"].key == K(["small", "Shift"])
    assert shift.asset_args["internal_asset_deps"] == {"out": {K(["small", "Numbers"])}}
    assert shift.asset_args["deps"] is None  # the input is a data dep, not an extra one
    # a step op's steps pass notes to no step inside it
    assert all(s.children == {"out": ()} for op in plan.ops for s in op.steps)


def test_the_workflows_values_are_the_launchpad_defaults(tmp_path):
    plan = compiled(small(tmp_path))
    assert field_default(op_named(plan, "small__Numbers"), "n") == 4
    assert field_default(op_named(plan, "small__Shift"), "scale") == 3
    # a parameter bound to a resource is no launchpad field
    assert set(op_named(plan, "small__Shift").asset_args["config_schema"]) == {"scale", "runtime"}


def test_run_settings_given_to_the_workflow_are_the_runtime_defaults(tmp_path):
    plan = compiled(small(tmp_path, runtime={"Total": {"num_workers": 4}, "on_item_error": "skip"}))
    total = op_named(plan, "small__Total")
    runtime = field_default(total, "runtime")
    assert runtime["num_workers"] == 4 and runtime["on_item_error"] == "skip"
    shift = field_default(op_named(plan, "small__Shift"), "runtime")
    assert shift["on_item_error"] == "skip"
    assert "num_workers" not in shift  # a plain step has no loader settings


def test_a_batch_step_gets_loader_settings_and_the_gpu_pool(tmp_path):
    plan = compiled(small(tmp_path))
    total, shift = op_named(plan, "small__Total"), op_named(plan, "small__Shift")
    batch_runtime = field_default(total, "runtime")
    assert {"num_workers", "worker_type", "device", "batch_size"} - set(batch_runtime) == {
        "batch_size"
    }
    assert {"batch_size", "item_key"} <= set(total.asset_args["config_schema"])
    assert total.asset_args["pool"] == "gpu"
    assert "num_workers" not in field_default(shift, "runtime")
    assert shift.asset_args["pool"] is None
    assert [s.kind for s in total.steps] == ["batch"]


def test_a_step_bound_to_a_resource_requires_its_key(tmp_path):
    plan = compiled(small(tmp_path))
    assert plan.names.resource_keys == {"9": "small__Offset"}
    shift = op_named(plan, "small__Shift")
    assert shift.steps[0].resource_keys == {"by": "small__Offset"}
    assert shift.asset_args["required_resource_keys"] == {"small__Offset"}
    assert (
        '"resources":{"9":"small__Offset","Offset":"small__Offset"}'
        in (shift.asset_args["op_tags"]["dagster_graphbook/steps"])
    )
    for name in ("small__Numbers", "small__Total"):
        assert op_named(plan, name).asset_args["required_resource_keys"] == set()


def test_op_tags_say_which_node_and_class_each_op_runs(tmp_path):
    plan = compiled(small(tmp_path), op_tags={"team": "vision"})
    tags = op_named(plan, "small__Total").asset_args["op_tags"]
    assert tags["graphbook/node_id"] == "3" and tags["graphbook/class"] == "Total"
    assert tags["team"] == "vision"
    assert op_named(plan, "small__Total").asset_args["description"] == (
        "Sum each note's items, two items a batch."
    )


def test_streaming_compiles_one_op_that_stores_only_what_is_read_outside(tmp_path):
    plan = compiled(small(tmp_path), streaming=True)
    assert plan.segment == ("1", "2", "3")
    [op] = plan.ops
    assert op.name == "small__stream" and op.streamed is True
    assert [s.step_name for s in op.steps] == ["Numbers", "Shift", "Total"]
    assert op.outputs == {
        ("1", "out"): "Numbers__out",
        ("2", "out"): "Shift__out",
        ("3", "out"): "Total__out",
    }
    assert op.stored == {("3", "out")}  # no step outside reads Numbers or Shift
    assert op.asset_args["outs"]["Numbers__out"].dagster_type is dg.Nothing
    assert op.steps[0].children == {"out": ("2",)}
    assert set(op.asset_args["config_schema"]) == {
        "small__Numbers",
        "small__Shift",
        "small__Total",
        "streaming",
    }
    assert op.asset_args["op_tags"]["graphbook/streaming"] == "true"
    assert op.asset_args["description"] == "Graphbook workflow `small` streamed as one op (3 steps)"
    assert op.shard is None


def test_a_named_segment_streams_first_and_stores_the_pin_read_after_it(tmp_path):
    plan = compiled(small(tmp_path), streaming=["Numbers", "Shift"])
    assert plan.segment == ("1", "2")
    assert [op.name for op in plan.ops] == ["small__stream", "small__Total"]
    stream, total = plan.ops
    assert stream.stored == {("2", "out")}  # Total, outside the segment, reads it
    assert stream.asset_args["description"].endswith("(2 steps (Numbers, Shift))")
    assert total.asset_args["ins"]["in_0"].key == K(["small", "Shift"])


def test_checks_are_bound_to_their_steps_asset(tmp_path):
    check = StepCheck(step="Total", metric="row_count", min=1)
    plan = compiled(small(tmp_path), checks={"3": [check]})
    total = op_named(plan, "small__Total")
    [bound] = total.checks
    assert bound.check is check and bound.asset_key == K(["small", "Total"]) and bound.pin == "out"
    [spec] = total.asset_args["check_specs"]
    assert spec.asset_key == K(["small", "Total"])
    assert op_named(plan, "small__Shift").asset_args["check_specs"] is None


def test_a_partitioned_source_gets_a_source_has_notes_check_unless_ignored(tmp_path):
    days = dg.DailyPartitionsDefinition(start_date="2026-01-01")
    plan = compiled(small(tmp_path), partitions_def=days, empty_source="blocking")
    [check] = op_named(plan, "small__Numbers").checks
    assert isinstance(check, SourceHasNotes) and check.asset_key == K(["small", "Numbers"])
    assert op_named(plan, "small__Shift").checks == ()  # not a source
    assert op_named(plan, "small__Numbers").asset_args["partitions_def"] is days
    ignored = compiled(small(tmp_path / "again"), partitions_def=days, empty_source="ignore")
    assert op_named(ignored, "small__Numbers").checks == ()


def test_storage_options_go_on_the_op_and_its_stored_specs(tmp_path):
    plan = compiled(small(tmp_path), storage={"notes_dir": "/data/notes"})
    shift = op_named(plan, "small__Shift")
    assert shift.storage == {"notes_dir": "/data/notes"}
    assert shift.asset_args["outs"]["out"].metadata["notes_dir"] == "/data/notes"


def test_compile_op_builds_the_op_of_any_one_step(tmp_path):
    workflow = small(tmp_path)
    policy = dg.RetryPolicy(max_retries=2)
    op = compile_op(
        workflow,
        GraphbookTranslator(),
        ["3"],
        streamed=False,
        resource_keys={"9": "small__Offset"},
        options=WorkflowOptions(retry_policy=policy, pool="gpus-of-team-a"),
        external_deps=[K(["raw", "images"])],
    )
    assert op.name == "small__Total" and [s.node_id for s in op.steps] == ["3"]
    assert op.asset_args["retry_policy"] is policy
    assert op.asset_args["pool"] == "gpus-of-team-a"
    assert [d.asset_key for d in op.asset_args["deps"]] == [K(["raw", "images"])]
    assert op.asset_args["internal_asset_deps"]["out"] == {
        K(["small", "Shift"]),
        K(["raw", "images"]),
    }


def test_a_parameter_named_runtime_is_refused_naming_the_workflow_and_node(tmp_path):
    workflow = small(tmp_path, reserved=True)
    with pytest.raises(WorkflowError, match=r"node 4 \(Reserved\): parameter name 'runtime'") as e:
        compiled(workflow)
    assert e.value.source.endswith("small.json")


def test_checks_on_streamed_steps_are_refused_naming_them(tmp_path):
    workflow = small(tmp_path)
    checks = {"2": [StepCheck(step="Shift", metric="row_count", min=1)]}
    with pytest.raises(WorkflowError, match=r"asset checks on streamed steps \(Shift\)") as e:
        compiled(workflow, streaming=True, checks=checks)
    assert e.value.source == workflow.source


def test_shards_of_a_plain_step_are_refused_naming_the_workflow_and_step(tmp_path):
    workflow = small(tmp_path, shards={"Shift": 2})
    with pytest.raises(
        WorkflowError, match=r"workflow 'small', step 'Shift' \(node 2\) asks for shards"
    ):
        compiled(workflow)


def test_shards_of_a_streamed_step_are_refused_naming_the_workflow_and_step(tmp_path):
    workflow = small(tmp_path, shards={"Total": 2})
    with pytest.raises(
        WorkflowError, match=r"workflow 'small', step 'Total' \(node 3\).*streaming"
    ):
        compiled(workflow, streaming=True)
    # out of the segment, the same shards compile
    [shard] = [op.shard for op in compiled(workflow).ops if op.shard is not None]
    assert shard.shards == 2
