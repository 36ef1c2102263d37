"""Hangs and skips: calls that really hang, in real worker processes.

A ``load_fn``/``dump_fn`` blocked in ``time.sleep`` (a blocking system call, like a read on a
stalled mount) for an hour must become an item error naming the item within the call limit.
"""

from __future__ import annotations

import time

import pytest

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import LOST_ITEMS_KEY, run_batch_step
from dagster_graphbook.execution.errors import StepFailure
from dagster_graphbook.execution.step.driver import run_step
from dagster_graphbook.plan.settings import BatchRuntime
from tests.support.nodes import copy_nodes

HANG = "stalled-mount/img_0007.png"


class HangingLoad(BatchStep):
    """``load_fn`` never returns for the item named HANG."""

    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        if item == HANG:
            time.sleep(3600)
        return len(item)

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note.setdefault("loaded", []).append(out)
        return None


class HangingDump(BatchStep):
    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def dump_fn(item):
        if item == HANG:
            time.sleep(3600)

    def on_item_batch(self, outputs, items, notes):
        return [(item,) for item in items]


def _notes():
    return [
        {"id": 0, "items": ["a.png", "b.png"]},
        {"id": 1, "items": [HANG, "c.png"]},
        {"id": 2, "items": ["d.png"]},
    ]


@pytest.mark.parametrize("cls", [HangingLoad, HangingDump], ids=["load_fn", "dump_fn"])
def test_a_hung_call_becomes_an_item_error_naming_the_item(cls):
    settings = BatchRuntime(
        num_workers=2, device="cpu", on_item_error="skip", call_timeout_s=1.0, stall_warning_s=0
    )
    start = time.perf_counter()
    result = run_batch_step(cls(), _notes(), settings, label="workflow 'w', step 'Hang' (node 1)")
    seconds = time.perf_counter() - start
    assert seconds < 15, seconds
    assert len(result.errors) == 1
    error = result.errors[0]
    assert HANG in error.item and error.note_index == 1 and error.item_index == 0
    assert "did not return within 1 s" in error.headline() and "time.sleep(3600)" in error.error
    notes = result.outputs["out"]
    assert [n["id"] for n in notes] == [0, 1, 2]  # only the stuck item is lost, every note leaves
    assert (
        notes[1][LOST_ITEMS_KEY] == [0]
        and LOST_ITEMS_KEY not in notes[0]
        and LOST_ITEMS_KEY not in notes[2]
    )


def test_a_hung_call_under_raise_fails_the_step_naming_the_item():
    settings = BatchRuntime(num_workers=2, device="cpu", call_timeout_s=1.0, stall_warning_s=0)
    with pytest.raises(StepFailure, match="stalled-mount/img_0007.png"):
        run_batch_step(HangingLoad(), _notes(), settings, label="step 'Hang'")


def test_the_stall_watchdog_names_the_stuck_items():
    lines = []
    settings = BatchRuntime(
        num_workers=2, device="cpu", on_item_error="skip", call_timeout_s=4.0, stall_warning_s=1.0
    )
    result = run_batch_step(
        HangingDump(),
        _notes(),
        settings,
        label="step 'Hang'",
        emit=lambda level, msg: lines.append((level, msg)),
    )
    assert len(result.errors) == 1
    stalls = [m for level, m in lines if level == "warning" and "no progress" in m]
    assert stalls and HANG in stalls[0] and "dump_fn" in stalls[0], lines


class Flaky(BatchStep):
    """``load_fn`` raises MemoryError for every item whose name starts with 'x'."""

    def __init__(self, batch_size=4, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        if item.startswith("x"):
            raise MemoryError(item)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None


def test_too_many_skipped_items_fail_the_step():
    notes = [{"items": [f"x{i}" if i % 4 else f"ok{i}" for i in range(20)]}]
    ok = run_batch_step(
        Flaky(),
        [dict(n) for n in notes],
        BatchRuntime(num_workers=0, device="cpu", on_item_error="skip"),
    )
    assert len(ok.errors) == 15  # without a limit the step reports success
    with pytest.raises(
        StepFailure, match=r"15 of 20 items \(75%\) were skipped.*max_skipped_fraction 0.5"
    ):  # the share is the whole step's: the driver checks it once all notes went through
        run_step(
            Flaky(),
            "batch",
            [dict(n) for n in notes],
            pins=["out"],
            label="step 'Flaky'",
            node=("1", "Flaky"),
            emit=lambda level, msg: None,
            runtime=BatchRuntime(
                num_workers=0, device="cpu", on_item_error="skip", max_skipped_fraction=0.5
            ),
        )


class OddLoad(BatchStep):
    """``load_fn`` returns a 3x4 tensor, except None, a dict or another shape for some items."""

    def __init__(self, batch_size=4, item_key="items"):
        super().__init__(batch_size, item_key)
        self.seen = []

    @staticmethod
    def load_fn(item):
        import torch

        odd = {"none.png": None, "dict.png": {"pixels": 1}, "big.png": torch.zeros(5, 5)}
        return odd[item] if item in odd else torch.ones(3, 4)

    def on_item_batch(self, outputs, items, notes):
        import torch

        torch.stack(list(outputs))  # what a model call does: fails on any odd value
        self.seen += list(items)  # items the model processed
        return None


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_an_odd_load_fn_value_is_blamed_on_its_item_and_loses_only_it(worker_type):
    notes = [
        {"items": ["a.png", "none.png", "b.png", "c.png"]},
        {"items": ["d.png", "dict.png", "big.png", "e.png"]},
    ]
    step = OddLoad()
    settings = BatchRuntime(
        num_workers=2,
        worker_type=worker_type,
        device="cpu",
        on_item_error="skip",
        stall_warning_s=0,
    )
    result = run_batch_step(step, notes, settings, label="step 'Odd'")
    assert sorted(e.item.strip("'") for e in result.errors) == ["big.png", "dict.png", "none.png"]
    assert all(e.stage == "load_fn" for e in result.errors)
    none_error = next(e for e in result.errors if "none.png" in e.item)
    assert (
        "load_fn returned NoneType None for this item" in none_error.headline()
        and "[3, 4]" in none_error.headline()
    )
    assert sorted(step.seen) == [
        "a.png",
        "b.png",
        "c.png",
        "d.png",
        "e.png",
    ]  # every good item reached the model
    assert [n[LOST_ITEMS_KEY] for n in result.outputs["out"]] == [[1], [1, 2]]


class SizedImages(BatchStep):
    """Images of many sizes, as real folders hold: ``on_item_batch`` handles each on its own."""

    def __init__(self, batch_size=4, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        import torch

        return torch.zeros(3, item, item) if item else None

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note.setdefault("sizes", []).append(None if out is None else out.shape[-1])
        return None


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_values_of_many_shapes_reach_on_item_batch_when_it_copes(worker_type):
    """Odd values are blamed only when on_item_batch fails on them: a batch of images of several
    sizes (16, 16, 17, ...), or a None the step handles itself, loses nothing."""
    notes = [{"items": [16, 16, 17, 0]}, {"items": [18, 16, 16, 19]}]
    settings = BatchRuntime(
        num_workers=2,
        worker_type=worker_type,
        device="cpu",
        on_item_error="raise",
        stall_warning_s=0,
    )
    result = run_batch_step(SizedImages(), notes, settings, label="step 'Sized'")
    assert not result.errors
    assert [n["sizes"] for n in result.outputs["out"]] == [[16, 16, 17, None], [18, 16, 16, 19]]


def test_a_plain_step_stuck_on_a_note_says_where(tmp_path, run_wf, dagster_home):
    """A source or plain step blocked in its own code logged nothing, however long it waited;
    now the stall watchdog names the workflow, the step and the note, as for batch steps."""
    import dagster as dg

    from tests.support.workflows import edge, step_node, write_workflow

    nodes = copy_nodes(tmp_path / "nodes", "stuck_nodes.py", "stuck_loader")
    wf = write_workflow(
        tmp_path,
        "stall",
        [step_node("0", "Count", {}, source=True), step_node("1", "Stuck", {})],
        [edge("0", "out", "1")],
    )
    run = run_wf(wf, [nodes], {"Stuck.runtime.stall_warning_s": 1.0})
    assert run.success, run.failure
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        warnings = [r.user_message for r in instance.all_logs(run.run_id) if r.level >= 30]
    stalls = [w for w in warnings if "no progress for" in w]
    assert stalls, warnings
    assert stalls[0].startswith("workflow 'stall', step 'Stuck' (node 1): no progress for ")
    assert "still in note 1 {'i': 1}" in stalls[0], stalls


def test_call_timeout_on_thread_workers_says_it_is_not_enforced():
    """``call_timeout_s`` with ``worker_type: thread`` did nothing, silently: a load_fn stuck on
    a FIFO hung the step for good while the operator believed it bounded."""
    lines = []
    settings = BatchRuntime(
        num_workers=2, worker_type="thread", device="cpu", call_timeout_s=2.0, stall_warning_s=0
    )
    notes = [{"id": 0, "items": ["a.png", "b.png"]}]
    result = run_batch_step(
        HangingLoad(), notes, settings, label="step 'Hang'", emit=lambda *e: lines.append(e)
    )
    assert result.outputs["out"][0]["loaded"] == [5, 5]
    warned = [m for level, m in lines if level == "warning" and "call_timeout_s" in m]
    assert warned and "not enforced on thread workers" in warned[0], lines
