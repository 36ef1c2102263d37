"""One path, failures: a step op and a streaming op fail alike. A failed ``on_start`` leaves no
stall watchdog thread in either mode, a killed loader worker is a ``WorkerDied`` (pids, stage) in
both, and a null runtime setting is refused before the run, since the launchpad offers no null for
a setting that takes none."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from dagster_graphbook.authoring.steps import BatchStep, Step
from dagster_graphbook.errors import RequestError
from dagster_graphbook.execution.errors import StepFailure, WorkerDied
from dagster_graphbook.execution.step.driver import StepDriver, run_all
from dagster_graphbook.execution.step.stream import StreamingRun, StreamStep
from dagster_graphbook.plan.settings import BatchRuntime, StepRuntime, StreamSettings
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

MODES = [pytest.param(False, id="default"), pytest.param(True, id="streaming")]


def _watchdogs() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "graphbook-stall-watchdog")


class _BadStart(Step):
    Outputs = ["out"]

    def on_start(self):
        raise RuntimeError("no GPU here")


def _driver(step, kind, runtime, chunked):
    return StepDriver(
        step, kind, runtime, pins=["out"], label="red", node=("1", type(step).__name__),
        emit=lambda level, msg: None, chunked=chunked,
    )  # fmt: skip


@pytest.mark.parametrize("streaming", MODES)
def test_a_failed_on_start_leaves_no_stall_watchdog_thread_behind(streaming):
    """``StepDriver.start`` starts the stall watchdog's thread before ``on_start``; when
    ``on_start`` raises, neither mode calls ``end``, so the thread is never stopped (before the
    refactor ``run_step`` held it in a ``with``). Each such op leaves one polling thread in the
    process for good (an in-process executor, a test session, a code server running jobs)."""
    before = _watchdogs()
    for _ in range(3):
        driver = _driver(_BadStart(), "step", StepRuntime(stall_warning_s=60.0), streaming)
        with pytest.raises(StepFailure, match="on_start failed"):
            if streaming:
                StreamingRun([StreamStep.of(driver, {}, set())], lambda *_: None,
                             StreamSettings()).run()  # fmt: skip
            else:
                run_all(driver, [{"i": 0}])
    deadline = time.monotonic() + 5
    while _watchdogs() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _watchdogs() == before, f"{_watchdogs() - before} stall watchdog threads left running"


class _Killer(BatchStep):
    """``load_fn`` kills its own worker process on the item ``"kill"`` (as the OOM killer would)."""

    Outputs = ["out"]

    def __init__(self):
        super().__init__(batch_size=2, item_key="items")

    def load_fn(self, item):
        if item == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None


@pytest.mark.parametrize("streaming", MODES)
def test_a_killed_loader_worker_raises_worker_died_in_both_modes(streaming):
    """A loader worker killed by a signal fails the step with ``WorkerDied`` naming its pid and
    stage. In a stream the driver re-raises every ``StepFailure`` of a chunk as a plain
    ``StepFailure`` (to add "[note numbers count from the chunk ...]"), so the type, ``pids``
    and ``stage`` are lost: ``except WorkerDied`` and ``exc.pids`` only work in the default
    mode."""
    notes = [{"items": [f"a{i}"]} for i in range(3)] + [{"items": ["kill"]}]
    notes += [{"items": [f"b{i}"]} for i in range(3)]
    runtime = BatchRuntime(num_workers=1, device="cpu", stall_warning_s=0)
    driver = _driver(_Killer(), "batch", runtime, streaming)
    driver.start()
    try:
        with pytest.raises(StepFailure) as caught:
            if streaming:  # two chunks, as the scheduler hands them over
                driver.feed(notes[:2])
                driver.feed(notes[2:])
            else:
                driver.feed(notes)
    finally:
        driver.end(True)
    exc = caught.value
    assert isinstance(exc, WorkerDied), f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    assert exc.pids and exc.stage == "load_fn"
    assert f"pid {exc.pids[0]} killed by SIGKILL" in str(exc)


# settings whose launchpad type was not nullable before the refactor (``dg.Field(int, ...)``)
NOT_NULLABLE = {
    "on_item_error", "retries", "retry_delay_s", "stall_warning_s", "num_workers",
    "worker_type", "prefetch", "start_method", "device", "max_dumps_in_flight", "worker_nice",
    "progress_interval_s",
}  # fmt: skip


def test_runtime_settings_are_not_nullable_in_the_launchpad():
    """``dg.Config.to_fields_dict()`` makes every field with a default ``Noneable`` (and ints
    ``IntSource``): the launchpad now offers ``null`` for ``retries``, ``num_workers``,
    ``stall_warning_s``, ``queue_items``..., which the settings classes then refuse inside the
    op. Before, only dump_workers, max_skipped_fraction and call_timeout_s were nullable."""
    from dagster._config import ConfigTypeKind

    from dagster_graphbook.plan.settings import config_fields  # what the launchpad is given

    for cls in (StepRuntime, BatchRuntime, StreamSettings):
        nullable = sorted(
            name
            for name, f in config_fields(cls).items()
            if f.config_type.kind == ConfigTypeKind.NONEABLE
            and (name in NOT_NULLABLE or name == "queue_items")
        )
        assert not nullable, f"{cls.__name__}: launchpad offers null for {nullable}"


@pytest.mark.parametrize("streaming", MODES)
@pytest.mark.parametrize(
    "key, words",
    [("Pass.runtime.retries", "takes an integer"), ("Pass.runtime.stall_warning_s", "number")],
)
def test_a_null_runtime_setting_is_refused_before_the_run(tmp_path, run_wf, streaming, key, words):
    """``Step.runtime.retries: null`` (``--set Pass.runtime.retries=null``, or null in the
    launchpad) was refused before the run with "Pass.runtime.retries takes an integer, not
    None". Now Dagster accepts it, the run starts (upstream steps run), and the op fails with
    an unnamed pydantic ValidationError ("cfg__Pass: pydantic_core...ValidationError: 1
    validation error for StepRuntime"), in both modes."""
    nodes = copy_nodes(tmp_path / "nodes", "red_nodes.py", "one_path_failures")
    wf = write_workflow(
        tmp_path,
        "nulls",
        [step_node("0", "Numbers", {}, source=True), step_node("1", "Pass", {})],
        [edge("0", "out", "1")],
    )
    with pytest.raises(RequestError, match=words):
        run = run_wf(wf, [nodes], {key: None}, streaming=streaming)
        pytest.fail(f"the run started: success={run.success}, failure={run.failure!r}")
