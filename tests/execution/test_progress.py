"""Progress of a batch step: the short line of issue 14.6, its timing, and the terminal display."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.cli.main import LiveDisplay
from dagster_graphbook.execution.batch import run_batch_step
from dagster_graphbook.execution.progress import PROGRESS_LINE, Progress
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


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _entry(message=None, kind=None, step="job__Slow"):
    event = SimpleNamespace(event_type_value=kind) if kind else None
    return SimpleNamespace(
        dagster_event=event, step_key=step, user_message=message, level=20, timestamp=time.time()
    )


def test_terminal_rewrites_progress_lines_in_place_and_ends_them():
    out = _Terminal()
    display = LiveDisplay(instance=None, token="t", out=out)
    display._show(_entry("10/20 (50%) · 5.0 items/s · ETA 2 s · 0 failed · queues: x"))
    display._show(_entry("20/20 (100%) · 5.0 items/s · ETA 0 s · 0 failed · queues: x"))
    display._show(_entry(kind="STEP_SUCCESS"))
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 2 and text.count("\n") == 2, repr(text)
    assert text.index("20/20") < text.index("\n") < text.index("✔")

    piped = io.StringIO()  # not a terminal: one line each, as before
    display = LiveDisplay(instance=None, token="t", out=piped)
    display._show(_entry("10/20 (50%) · 5.0 items/s · ETA 2 s · 0 failed · queues: x"))
    display._show(_entry("20/20 (100%) · 5.0 items/s · ETA 0 s · 0 failed · queues: x"))
    assert "\r" not in piped.getvalue() and piped.getvalue().count("\n") == 2


def test_a_message_of_no_step_has_no_empty_label():
    out = io.StringIO()
    LiveDisplay(instance=None, token="t", out=out)._show(_entry("model: loaded", step=None))
    assert out.getvalue() == "  model: loaded\n"


def test_launchpad_config_shows_the_runtime_block_with_its_defaults():
    """The Launchpad scaffolds a step's config from the schema's defaults: ``runtime`` must have
    one, or its settings (workers, device, on_item_error, timeouts) stay hidden."""
    import dagster as dg

    from dagster_graphbook import GraphbookWorkflow, build_definitions

    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    defs = build_definitions(
        [
            GraphbookWorkflow(
                root / "workflows/nightly_shapes.json", custom_nodes=[root / "custom_nodes/nightly"]
            )
        ]
    )
    job = defs.resolve_job_def("nightly_shapes")
    config = dg.validate_run_config(job, {})
    runtime = config["ops"]["nightly_shapes__ClassifyShapes"]["config"]["runtime"]
    assert runtime["num_workers"] == 2 and runtime["device"] == "auto"
    assert runtime["on_item_error"] == "raise"
    assert config["ops"]["nightly_shapes__ReviewSplit"]["config"]["runtime"]["retries"] == 0
