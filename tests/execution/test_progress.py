"""Progress of a batch step: its short line and its timing (the terminal display:
tests/cli/test_main.py)."""

from __future__ import annotations

import time

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.progress import PROGRESS_LINE, Progress
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.plan.settings import BatchRuntime


def test_line_shows_done_percent_rate_eta_and_failures():
    lines = []
    progress = Progress("workflow 'w', step 'S' (node 1)", 3000, 30, "cpu", lines.append, 5.0)
    progress.start -= 21.9  # 21.9 s in
    progress.add("processed", 1150)
    progress.add("failed", 2)
    line = progress.line(loader_in_flight=4, dumps_in_flight=3)
    assert line.startswith("1152/3000 (38%) · 52.5 items/s · ETA 35 s · 2 failed · "), line
    assert "loader 4 batches, dumps 3" in line and "workflow 'w'" not in line
    assert PROGRESS_LINE.match(line)


def test_first_report_after_about_a_second_then_every_interval():
    lines = []
    progress = Progress("s", 10, 1, "cpu", lines.append, interval_s=5.0)
    progress.maybe_report(0, 0)
    assert lines == []  # not at once
    time.sleep(1.05)
    progress.maybe_report(0, 0)
    assert len(lines) == 1  # after about 1 s, not after the 5 s interval
    progress.maybe_report(0, 0)
    assert len(lines) == 1


def test_no_periodic_line_once_every_item_is_done():
    """The step's final line follows at once: a periodic one at 100% would say it twice."""
    lines = []
    progress = Progress("s", 4, 1, "cpu", lines.append, interval_s=5.0)
    progress.add("processed", 3)
    progress.next_report = 0.0  # due
    progress.maybe_report(1, 0)
    assert [line.split(" ", 1)[0] for line in lines] == ["3/4"]
    progress.add("processed", 1)
    progress.next_report = 0.0
    progress.maybe_report(0, 0)
    assert len(lines) == 1


class Slow(BatchStep):
    def __init__(self):
        super().__init__(batch_size=2, item_key="items")

    @staticmethod
    def load_fn(item):
        time.sleep(0.1)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None


def test_a_batch_step_reports_progress_lines_in_the_short_form():
    messages = []
    notes = [{"items": list(range(20))}]
    settings = BatchRuntime(
        num_workers=1, worker_type="thread", device="cpu", progress_interval_s=0.5
    )
    run_batch_step(
        Slow(), notes, settings, label="step 'Slow'", emit=lambda level, msg: messages.append(msg)
    )
    progress = [m for m in messages if PROGRESS_LINE.match(m)]
    assert progress, messages
    assert all("/20 (" in m and "items/s" in m and "ETA" in m for m in progress)
    done = [m.split(" ", 1)[0] for m in progress]
    assert done[-1] == "20/20" and len(set(done)) == len(done), progress  # no line twice
