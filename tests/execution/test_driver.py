"""The step driver directly (no Dagster): hook order, pins, source yields, failures in
``on_start`` and ``on_end``, and ``DumpJSONL`` driven as a step."""

from __future__ import annotations

import random

import pytest


def _drive(step_obj, kind, notes=(), pins=("out",), **kw):
    from dagster_graphbook.execution.step.driver import run_step

    logs = []
    result = run_step(
        step_obj,
        kind,
        list(notes),
        pins=list(pins),
        label="workflow 'w', step 'S' (node 1)",
        node=("1", "S"),
        emit=lambda level, msg: logs.append((level, msg)),
        **kw,
    )
    return result, logs


def test_driver_hook_order_and_once_per_run():
    from dagster_graphbook.authoring.steps import Step

    calls = []

    class Traced(Step):
        def on_start(self):
            calls.append("on_start")

        def on_data(self, data):
            calls.append(f"on_data {data['i']}")

        def route(self, data):
            calls.append(f"route {data['i']}")
            return "out"

        def on_end(self):
            calls.append("on_end")

    result, _ = _drive(Traced(), "step", [{"i": 0}, {"i": 1}])
    assert calls == ["on_start", "on_data 0", "route 0", "on_data 1", "route 1", "on_end"]
    assert result.outputs == {"out": [{"i": 0}, {"i": 1}]}
    assert result.stats["notes_in"] == 2 and result.stats["notes_out"] == 2


def test_driver_route_to_undeclared_pin_drops_with_warning_and_count():
    """Graphbook completes the run, dropping notes sent to an undeclared pin; we say so (#10.6)."""
    from dagster_graphbook.authoring.steps import Step

    class Wrong(Step):
        Outputs = ["A", "B"]

        def route(self, data):
            return "C" if data["i"] % 2 else "A"

    result, logs = _drive(Wrong(), "step", [{"i": 0}, {"i": 1}, {"i": 3}], pins=("A", "B"))
    assert result.outputs == {"A": [{"i": 0}], "B": []}
    assert result.stats["notes_dropped_C"] == 2
    warnings = [m for level, m in logs if level == "warning" and "pin 'C'" in m]
    assert len(warnings) == 1 and "does not declare (its pins: A, B)" in warnings[0]


def test_driver_on_start_failure_and_on_end_failure():
    from dagster_graphbook.authoring.steps import Step
    from dagster_graphbook.execution.errors import StepFailure

    class BadStart(Step):
        def on_start(self):
            raise OSError("no disk")

    with pytest.raises(StepFailure, match="on_start failed: OSError: no disk"):
        _drive(BadStart(), "step", [{"i": 0}])

    class BadEnd(Step):
        def on_end(self):
            raise RuntimeError("flush failed")

    with pytest.raises(StepFailure, match="on_end failed: RuntimeError: flush failed"):
        _drive(BadEnd(), "step", [{"i": 0}])

    class BadBoth(Step):
        def on_data(self, data):
            raise ValueError("bad note")

        def on_end(self):
            raise RuntimeError("flush failed")

    with pytest.raises(StepFailure, match="failed on note 0") as info:
        _drive(BadBoth(), "step", [{"i": 0}])
    assert "ValueError: bad note" in str(info.value)  # the first error wins; on_end's is logged


def test_dump_jsonl_keeps_previous_file_when_the_run_fails(tmp_path):
    from dagster_graphbook.authoring.steps import DumpJSONL
    from dagster_graphbook.execution.errors import StepFailure

    path = tmp_path / "out.jsonl"
    _drive(DumpJSONL(str(path)), "step", [{"i": 0}, {"i": 1}])
    complete = path.read_text()
    assert complete.splitlines() == ['{"i": 0}', '{"i": 1}']
    with pytest.raises(StepFailure, match="failed on note 1"):
        _drive(
            DumpJSONL(str(path)), "step", [{"i": 5}, {"i": object()}, {"i": 7}]
        )  # note 1 is not JSON
    assert path.read_text() == complete
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary file left


def test_source_yield_forms():
    from dagster_graphbook.authoring import output, source, step

    @step("Yields")
    @source()
    @output("out", "side")
    def yields(ctx):
        yield {"out": {"a": 1}}
        yield {"side": [{"b": 1}, {"b": 2}]}
        yield [{"c": 1}, {"c": 2}]
        yield {
            "name": "bare",
            "image": "x.png",
        }  # a bare note: Graphbook lost it on pins 'name'/'image'
        yield {"name": "bare2", "image": "y.png"}
        yield 7

    result, logs = _drive(yields(), "source", pins=("out", "side"))
    assert result.outputs["out"] == [
        {"a": 1},
        {"c": 1},
        {"c": 2},
        {"name": "bare", "image": "x.png"},
        {"name": "bare2", "image": "y.png"},
        7,
    ]
    assert result.outputs["side"] == [{"b": 1}, {"b": 2}]
    warnings = [m for level, m in logs if level == "warning"]
    assert len(warnings) == 1 and "not output pins" in warnings[0]


def test_class_source_with_a_generator_attribute():
    """A non-generator SourceStep is run through ``load()`` even if it keeps an RNG named
    ``generator``."""
    from dagster_graphbook.authoring.steps import SourceStep

    class Seeded(SourceStep):
        def __init__(self):
            super().__init__()
            self.generator = random.Random(0)  # e.g. a torch/numpy Generator in ML code

        def load(self):
            return {"out": [{"x": self.generator.random()} for _ in range(3)]}

    result, _ = _drive(Seeded(), "source")
    rng = random.Random(0)
    assert result.outputs["out"] == [{"x": rng.random()} for _ in range(3)]


def test_dump_jsonl_removes_what_a_killed_run_left(tmp_path):
    """kill -9 mid-write leaves a temporary file; the next run's DumpJSONL removes it."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "out.jsonl"
    writer = (
        "import sys, time\n"
        "from dagster_graphbook.authoring.steps import DumpJSONL\n"
        "d = DumpJSONL(sys.argv[1]); d.on_start()\n"
        "d.on_after_item({'i': 0}); d._file.flush()\n"
        "print('written', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", writer, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "written"
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(f".tmp-{proc.pid}-")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [p.name for p in tmp_path.iterdir()] == leftovers  # the kill left it

    from dagster_graphbook.authoring.steps import DumpJSONL

    _drive(DumpJSONL(str(path)), "step", [{"i": 1}])
    assert path.read_text().splitlines() == ['{"i": 1}']
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
