"""One path: a step op and a streaming op run their steps through the same driver, so the default
mode's safeguards hold in streaming too, and every runtime option is typed (and defaulted) once.

Each safeguard is checked in both modes on real Dagster runs with real worker processes.
"""

from __future__ import annotations

from typing import get_args

import dagster as dg
import dagster._config as dg_config
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from dagster_graphbook.plan.settings import BatchRuntime, StepRuntime, StreamSettings
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

MODES = [pytest.param(False, id="default"), pytest.param(True, id="streaming")]


@pytest.fixture
def nodes(tmp_path):
    return copy_nodes(tmp_path / "nodes", "one_path_nodes.py", "one_path")


def _batch_workflow(tmp_path):
    return write_workflow(
        tmp_path,
        "skips",
        [step_node("0", "Numbers", {"n": 69}, source=True), step_node("1", "Check", {})],
        [edge("0", "out", "1")],
    )


def _warnings(dagster_home, run_id):
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        return [r.user_message for r in instance.all_logs(run_id) if r.level >= 30]


@pytest.mark.parametrize("streaming", MODES)
def test_max_skipped_fraction_is_the_share_of_the_whole_step(tmp_path, nodes, run_wf, streaming):
    """69 one-item notes, the last item bad, skip, 0.1: 1 of 69 items is under the limit. A
    stream runs the batch step in chunks of 64 items; checked per chunk it failed with "1 of 5
    items (20%)"."""
    wf = _batch_workflow(tmp_path)
    settings = {
        "Check.runtime.on_item_error": "skip",
        "Check.runtime.max_skipped_fraction": 0.1,
        "Check.runtime.num_workers": 0,
        "Check.runtime.device": "cpu",
    }
    run = run_wf(wf, [nodes], settings, streaming=streaming)
    assert run.success, run.failure
    # over the limit, the failure counts the whole step's items in both modes
    bad = ",".join(str(i) for i in range(60, 68))  # two whole batches of 4: 8 of 69, 12%
    run = run_wf(wf, [nodes], {**settings, "Check.bad": bad}, streaming=streaming)
    assert not run.success
    assert "8 of 69 items (12%) were skipped" in run.failure, run.failure
    assert "max_skipped_fraction 0.1" in run.failure


@pytest.mark.parametrize("streaming", MODES)
def test_a_plain_step_stuck_on_a_note_warns_in_both_modes(
    tmp_path, nodes, run_wf, dagster_home, streaming
):
    """A plain step sleeping in its own code for 4 s with ``stall_warning_s: 1`` names the note;
    under ``streaming=True`` it logged nothing."""
    wf = write_workflow(
        tmp_path,
        "stall",
        [step_node("0", "Numbers", {"n": 3}, source=True), step_node("1", "Nap", {"seconds": 4})],
        [edge("0", "out", "1")],
    )
    run = run_wf(wf, [nodes], {"Nap.runtime.stall_warning_s": 1.0}, streaming=streaming)
    assert run.success, run.failure
    stalls = [w for w in _warnings(dagster_home, run.run_id) if "no progress for" in w]
    assert len(stalls) >= 2, stalls
    assert all(
        s.startswith("workflow 'stall', step 'Nap' (node 1): no progress for ") for s in stalls
    )
    assert "still in note 1 {'i': 1, 'items': ['item-1']}" in stalls[0], stalls


@pytest.mark.parametrize("streaming", MODES)
def test_a_stuck_source_warns_and_an_idle_step_does_not(
    tmp_path, nodes, run_wf, dagster_home, streaming
):
    """A source stuck in its own load for 4 s warns in both modes; in a stream the step waiting
    for its notes meanwhile is idle, not stalled, and says nothing."""
    wf = write_workflow(
        tmp_path,
        "stuck_source",
        [step_node("0", "Numbers", {"n": 3, "pause": 4}, source=True), step_node("1", "Nap", {})],
        [edge("0", "out", "1")],
    )
    params = {"Numbers.runtime.stall_warning_s": 1.0, "Nap.runtime.stall_warning_s": 1.0}
    run = run_wf(wf, [nodes], params, streaming=streaming)
    assert run.success, run.failure
    stalls = [w for w in _warnings(dagster_home, run.run_id) if "no progress for" in w]
    assert len(stalls) >= 2, stalls
    assert all(s.startswith("workflow 'stuck_source', step 'Numbers' (node 0)") for s in stalls)
    assert "still in the source's load" in stalls[0], stalls


def _runtime_fields(config_type) -> dict:
    """Each launchpad field: its default, description and whether it takes null."""
    return {
        name: (f.default_value if f.default_provided else None, f.description, _nullable(f))
        for name, f in config_type.fields.items()
    }


def _nullable(field) -> bool:
    return field.config_type.kind == dg_config.ConfigTypeKind.NONEABLE


def _class_fields(cls) -> dict:
    """Each field of a settings class: null only where its type is Optional."""
    return {
        name: (f.default, f.description, type(None) in get_args(f.annotation))
        for name, f in cls.model_fields.items()
    }


def test_runtime_blocks_of_a_step_op_and_a_streaming_op_come_from_the_same_classes(tmp_path, nodes):
    """The launchpad's run config schema of a batch step (default mode) and of the same step
    inside a streaming op: each ``runtime`` and ``streaming`` field, default and description
    is the settings class's, so a default exists once."""
    wf = _batch_workflow(tmp_path)
    schemas = {}
    for streaming in (False, True):
        defs = build_definitions([GraphbookWorkflow(wf, custom_nodes=[nodes], streaming=streaming)])
        job = defs.resolve_job_def("skips")
        schemas[streaming] = job.run_config_schema.config_type.fields["ops"].config_type.fields
    step_ops = schemas[False]
    batch = step_ops["skips__Check"].config_type.fields["config"].config_type.fields["runtime"]
    source = step_ops["skips__Numbers"].config_type.fields["config"].config_type.fields["runtime"]
    assert _runtime_fields(batch.config_type) == _class_fields(BatchRuntime)
    assert _runtime_fields(source.config_type) == _class_fields(StepRuntime)

    (stream_op,) = schemas[True].values()
    stream = stream_op.config_type.fields["config"].config_type.fields
    nested = stream["skips__Check"].config_type.fields["runtime"].config_type
    assert _runtime_fields(nested) == _class_fields(BatchRuntime)
    assert _runtime_fields(stream["streaming"].config_type) == _class_fields(StreamSettings)
    # a batch step's settings extend a step's: one default for the options they share
    assert set(StepRuntime.model_fields) < set(BatchRuntime.model_fields)
    shared = set(StreamSettings.model_fields) & set(BatchRuntime.model_fields)
    assert shared == {"progress_interval_s"}
    assert all(
        BatchRuntime.model_fields[k].default == StreamSettings.model_fields[k].default
        and BatchRuntime.model_fields[k].description == StreamSettings.model_fields[k].description
        for k in shared
    )


class _Counted(dict):
    """A note that counts how often it is turned into text (a note of tensors is costly to)."""

    reprs = 0

    def __repr__(self) -> str:
        type(self).reprs += 1
        return super().__repr__()


@pytest.mark.parametrize("streaming", MODES)
def test_the_stall_watchdog_does_not_repr_every_note(streaming):
    """The watchdog names the note a stuck step is in, but builds that text only when it warns:
    made for every note, the repr of notes holding tensors cost a stream of 2,000 images 2.9 s
    of 11 (``benchmarks/bench_streaming.py``)."""
    from dagster_graphbook.authoring.steps import Step
    from dagster_graphbook.execution.step.driver import StepDriver, run_all

    class Touch(Step):
        Outputs = ["out"]

        def on_data(self, data):
            data["seen"] = True

    _Counted.reprs = 0
    notes = [_Counted(i=i) for i in range(50)]
    driver = StepDriver(
        Touch(), "step", StepRuntime(stall_warning_s=60.0), pins=["out"], label="w",
        node=("1", "Touch"), emit=lambda level, msg: None, chunked=streaming,
    )  # fmt: skip
    if streaming:  # the scheduler feeds one note at a time
        driver.start()
        outputs = [driver.feed([note]).outputs["out"] for note in notes]
        driver.check()
        driver.end(False)
        assert sum(len(o) for o in outputs) == 50
    else:
        assert len(run_all(driver, notes).outputs["out"]) == 50
    assert all(n["seen"] for n in notes)
    assert _Counted.reprs == 0
