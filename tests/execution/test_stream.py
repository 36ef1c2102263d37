"""Streaming mode and compact tensors in notes, on real Dagster runs with real worker processes.

One workflow file serves most tests: a generator source, plain steps that append to a trace file
(so order and notes in flight are read from what really happened), a batch step whose load_fn
makes image-sized tensors in loader processes and whose dump_fn runs in dump processes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow


@pytest.fixture
def nodes(tmp_path: Path) -> Path:
    return copy_nodes(tmp_path / "nodes", "stream_nodes.py", "streamed_steps")


def _dfs_workflow(folder: Path, trace: Path, n: int = 3, **mark: object) -> Path:
    """Numbers -> A -> B -> C and A -> C: two edges into C."""
    nodes = [
        step_node("src", "Numbers", {"n": n, "trace": str(trace)}, source=True),
        step_node("A", "Mark", {"trace": str(trace)}, label="A"),
        step_node("B", "Mark", {"trace": str(trace), **mark}, label="B"),
        step_node("C", "Mark", {"trace": str(trace)}, label="C"),
    ]
    edges = [
        edge("src", "out", "A"),
        edge("A", "out", "B"),
        edge("A", "out", "C"),
        edge("B", "out", "C"),
    ]
    return write_workflow(folder, "dfs", nodes, edges)


def _images_workflow(folder: Path, trace: Path, n: int, **load: object) -> Path:
    nodes = [
        step_node("src", "Numbers", {"n": n, "trace": str(trace)}, source=True),
        step_node(
            "load", "LoadImages", {"batch_size": 8, "item_key": "paths", **load}, label="LoadImages"
        ),
        step_node("reduce", "Reduce", {"trace": str(trace)}, label="Reduce"),
    ]
    return write_workflow(
        folder, "images", nodes, [edge("src", "out", "load"), edge("load", "out", "reduce")]
    )


def _lines(trace: Path) -> list:
    return trace.read_text().split("\n")[:-1]


# ---------------------------------------------------------------------------------------------
# Part 1: a stored tensor costs its own bytes


@pytest.fixture(scope="module")
def default_images_run(tmp_path_factory):
    """The guide's LoadImages -> Reduce in the default mode (one op per step), run once."""
    from dagster_graphbook import run_workflow

    tmp = tmp_path_factory.mktemp("default_images")
    nodes = copy_nodes(tmp / "nodes", "stream_nodes.py", "streamed_steps")
    out_dir = tmp / "out"
    out_dir.mkdir()
    wf = _images_workflow(tmp, tmp / "trace.txt", 24, out_dir=str(out_dir))
    home = tmp / "home"
    home.mkdir()
    old = os.environ.get("DAGSTER_GRAPHBOOK_TENSOR_WARN_MB")
    os.environ["DAGSTER_GRAPHBOOK_TENSOR_WARN_MB"] = "0.5"
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            run = run_workflow(
                wf,
                [nodes],
                {"LoadImages.runtime.num_workers": 2, "LoadImages.runtime.device": "cpu"},
                instance=instance,
            )
            assert run.success, run.failure
            warnings = [
                r.user_message
                for r in instance.all_logs(run.run_id)
                if r.level == 30 and r.user_message
            ]
            mats = {}
            for record in instance.all_logs(
                run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            ):
                m = record.asset_materialization
                mats[m.asset_key] = {k: v.value for k, v in m.metadata.items()}
    finally:
        os.environ.pop("DAGSTER_GRAPHBOOK_TENSOR_WARN_MB")
        if old is not None:
            os.environ["DAGSTER_GRAPHBOOK_TENSOR_WARN_MB"] = old
    return run, mats, warnings, out_dir


def test_default_mode_stores_each_tensor_at_its_own_size(default_images_run):
    run, mats, _, _ = default_images_run
    path = mats[dg.AssetKey(["images", "LoadImages"])]["dagster/uri"]
    raw = 24 * 3 * 64 * 64 * 4
    assert os.path.getsize(path) <= 1.1 * raw, (
        f"stored {os.path.getsize(path)} bytes for {raw} bytes of tensors"
    )
    assert [n["mean"] for n in run["Reduce"]["out"]] == [float(i) for i in range(24)]


def test_dump_fn_receives_only_its_own_tensor(default_images_run):
    _, _, _, out_dir = default_images_run
    sizes = [tuple(map(int, p.read_text().split())) for p in sorted(out_dir.iterdir())]
    assert len(sizes) == 24
    assert all(storage == own for storage, own in sizes), sizes[:3]


def test_default_mode_warns_when_stored_notes_carry_many_tensors(default_images_run):
    _, _, warnings, _ = default_images_run
    heavy = [w for w in warnings if "streaming=True" in w]
    assert len(heavy) == 1 and "LoadImages" in heavy[0], warnings  # Reduce's notes hold no tensors


# ---------------------------------------------------------------------------------------------
# Part 2: streaming


def test_streaming_follows_graphbooks_depth_first_order(tmp_path, nodes, run_wf, dagster_home):
    trace = tmp_path / "trace.txt"
    wf = _dfs_workflow(tmp_path, trace, n=3)
    run = run_wf(wf, [nodes], streaming=True)
    assert run.success, run.failure
    # Graph.run(): each output goes down every child (per pin, per note, per child, recursively)
    # before the source is asked again; C is reached from B first (A's children in node order)
    expected = []
    for i in range(3):
        expected += [f"src {i}", f"A {i}", f"B {i}", f"C {i}", f"C {i}"]
    assert _lines(trace) == expected
    # only the sink keeps notes; the other pins are materialized with counts only
    assert {s for s, pins in run.notes.items() if pins} == {"C"} and len(run["C"]["out"]) == 6
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        mats = {}
        for record in instance.all_logs(
            run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ):
            m = record.asset_materialization
            mats[m.asset_key.path[-1]] = {k: v.value for k, v in m.metadata.items()}
        messages = [r.user_message for r in instance.all_logs(run.run_id)]
    assert {k: (m["dagster/row_count"], m["stored"]) for k, m in mats.items()} == {
        "Numbers": (3, False),
        "A": (3, False),
        "B": (3, False),
        "C": (6, True),
    }
    assert "dagster/uri" in mats["C"] and "dagster/uri" not in mats["A"]
    # progress per step in the event log
    assert "workflow 'dfs', step 'C' (node C): notes in 6, out: out 6; done" in messages


def test_streaming_asks_several_sources_in_turn(tmp_path, nodes, run_wf):
    trace = tmp_path / "trace.txt"
    steps = [
        step_node("s1", "Numbers", {"n": 2, "trace": str(trace)}, source=True),
        step_node("s2", "Numbers", {"n": 3, "trace": str(trace)}, source=True),
        step_node("C", "Mark", {"trace": str(trace)}, label="C"),
    ]
    wf = write_workflow(tmp_path, "two", steps, [edge("s1", "out", "C"), edge("s2", "out", "C")])
    run = run_wf(wf, [nodes], streaming=True)
    assert run.success, run.failure
    # Graphbook's passes: each source yields once per pass, its note going down before the next
    assert _lines(trace) == [
        "s1 0",
        "C 0",
        "s2 0",
        "C 0",
        "s1 1",
        "C 1",
        "s2 1",
        "C 1",
        "s2 2",
        "C 2",
    ]


def test_backpressure_a_slow_consumer_holds_the_source(tmp_path, nodes, run_wf):
    trace = tmp_path / "trace.txt"
    wf = _images_workflow(tmp_path, trace, 120)
    params = {
        "LoadImages.runtime.num_workers": 0,
        "LoadImages.runtime.device": "cpu",
        "Reduce.delay": 0.005,
    }
    config = {"ops": {"images__stream": {"config": {"streaming": {"queue_items": 16}}}}}
    run = run_wf(wf, [nodes], params, streaming=True, run_config=config)
    assert run.success, run.failure
    produced = consumed = in_flight = 0
    for line in _lines(trace):
        produced += line.startswith("src")
        consumed += line.startswith("reduce")
        in_flight = max(in_flight, produced - consumed)
    assert consumed == 120
    assert in_flight <= 16, f"the source ran {in_flight} notes ahead of the consumer"
    assert [n["mean"] for n in run["Reduce"]["out"]] == [float(i) for i in range(120)]


def test_a_streamed_batch_step_forks_its_loader_workers_once(tmp_path, nodes, run_wf):
    """The stream runs the batch step once per chunk of 16 items (8 chunks here); its loader
    workers are forked at the first chunk and serve every later one (items travel with their
    tasks), so two workers load all 120 items, in order."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    wf = _images_workflow(tmp_path, tmp_path / "trace.txt", 120, pid_dir=str(pid_dir))
    params = {"LoadImages.runtime.num_workers": 2, "LoadImages.runtime.device": "cpu"}
    config = {"ops": {"images__stream": {"config": {"streaming": {"queue_items": 16}}}}}
    run = run_wf(wf, [nodes], params, streaming=True, run_config=config)
    assert run.success, run.failure
    assert [n["mean"] for n in run["Reduce"]["out"]] == [float(i) for i in range(120)]
    pids = {int(p.name.split("-")[1]) for p in pid_dir.iterdir()}
    assert len(pids) == 2, f"{len(pids)} loader processes for 8 chunks"
    alive = [p for p in psutil.Process().children() if p.pid in pids]
    assert not alive, f"loader workers left after the step ended: {alive}"


def test_mnist_style_eval_on_end_sees_the_model_trained_in_the_same_stream(tmp_path, dagster_home):
    """MnistClassifier.py's shape: dataset -> eval -> train, one model resource; eval's on_end
    must evaluate the trained model, which only Graphbook's streaming order gives."""
    from dagster_graphbook import run_workflow

    nodes = copy_nodes(tmp_path / "mnist_nodes", "mnist_nodes.py", "streamed_mnist")
    wf = write_workflow(
        tmp_path,
        "mnist",
        [
            step_node("data", "Dataset", {"batches": 40}, source=True),
            step_node("eval", "Eval", label="Eval"),
            step_node("train", "Train", label="Train"),
            resource_node("model", "Model"),
        ],
        [
            edge("data", "out", "eval"),
            edge("eval", "out", "train"),
            edge("model", "resource", "eval", "model"),
            edge("model", "resource", "train", "model"),
        ],
    )
    accuracies = {}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for streaming in (True, False):
            run = run_workflow(wf, [nodes], instance=instance, streaming=streaming)
            assert run.success, run.failure
            event = instance.get_latest_materialization_event(dg.AssetKey(["mnist", "Eval"]))
            accuracies[streaming] = event.asset_materialization.metadata["accuracy"].value
    assert accuracies[True] >= 0.95, accuracies  # trained before on_end, as in Graphbook
    assert accuracies[False] < 0.5, accuracies  # one op per step: eval's on_end ran before training


def test_streaming_failure_names_workflow_step_and_note(tmp_path, nodes, run_wf):
    wf = _dfs_workflow(tmp_path, tmp_path / "trace.txt", n=5, fail_at=3)
    run = run_wf(wf, [nodes], streaming=True)
    assert not run.success
    assert "workflow 'dfs', step 'B' (node B): failed on note 3" in run.failure
    assert "cannot mark 3" in run.failure


def test_streaming_batch_failure_names_the_item(tmp_path, nodes, run_wf):
    wf = _images_workflow(tmp_path, tmp_path / "trace.txt", 20, bad_item="img-13")
    params = {"LoadImages.runtime.num_workers": 2, "LoadImages.runtime.device": "cpu"}
    run = run_wf(wf, [nodes], params, streaming=True)
    assert not run.success
    assert (
        "step 'LoadImages'" in run.failure
        and "'img-13'" in run.failure
        and "unreadable image img-13" in run.failure
    )
    skipped = run_wf(
        wf, [nodes], {**params, "LoadImages.runtime.on_item_error": "skip"}, streaming=True
    )
    assert skipped.success, skipped.failure
    killed = run_wf(
        wf,
        [nodes],
        {**params, "LoadImages.bad_item": "", "LoadImages.kill_item": "img-5"},
        streaming=True,
    )
    assert not killed.success
    assert (
        "step 'LoadImages'" in killed.failure and "a loader worker process died" in killed.failure
    )
    # the bad item is recorded and skipped; its note goes on without its tensor, the others whole
    assert [n["mean"] for n in skipped["Reduce"]["out"]] == [
        0.0 if i == 13 else float(i) for i in range(20)
    ]


def test_streaming_asset_graph_shows_every_pin_with_its_edges(tmp_path, nodes):
    wf = _dfs_workflow(tmp_path, tmp_path / "trace.txt")
    graphs = {}
    for streaming in (False, True):
        defs = build_definitions([GraphbookWorkflow(wf, custom_nodes=[nodes], streaming=streaming)])
        graph = defs.resolve_asset_graph()
        graphs[streaming] = {
            key: set(graph.get(key).parent_keys) for key in graph.get_all_asset_keys()
        }
    assert graphs[True] == graphs[False]
    assert set(graphs[True]) == {dg.AssetKey(["dfs", s]) for s in ("Numbers", "A", "B", "C")}
    defs = build_definitions([GraphbookWorkflow(wf, custom_nodes=[nodes], streaming=True)])
    (op,) = {defs.resolve_asset_graph().get(k).assets_def.op.name for k in graphs[True]}
    assert op == "dfs__stream"


def test_yaml_component_cli_and_materialize_offer_streaming(
    tmp_path, nodes, dagster_home, monkeypatch
):
    from dagster_graphbook.cli.main import main
    from dagster_graphbook.defs.component.component import GraphbookWorkflowComponent
    from dagster_graphbook.runner.run import run_job

    wf = _dfs_workflow(tmp_path, tmp_path / "trace.txt", n=2)
    component = GraphbookWorkflowComponent(
        workflow=str(wf), custom_nodes=[str(nodes)], streaming=True
    )
    assert component.workflow_spec(tmp_path).streaming is True
    code = main(
        [
            "run",
            str(wf),
            "--custom-nodes",
            str(nodes),
            "--streaming",
            "--no-progress",
            "--dagster-home",
            dagster_home,
        ]
    )
    assert code == 0
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        (run,) = instance.get_runs()
        steps = {e.step_key for e in instance.all_logs(run.run_id) if e.step_key}
        assert steps == {"dfs__stream"}
        # materialize: a code location's streaming job; --set reaches the step inside the op
        (tmp_path / "stream_defs.py").write_text(
            textwrap.dedent(DEFS.format(wf=str(wf), nodes=str(nodes)))
        )
        monkeypatch.chdir(tmp_path)
        failed = run_job("dfs", {"B.fail_at": 1}, module="stream_defs", instance=instance)
    assert not failed.success and "step 'B' (node B): failed on note 1" in failed.failure


DEFS = """
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    spec = GraphbookWorkflow({wf!r}, custom_nodes=[{nodes!r}], streaming=True,
                             executor="in_process")
    defs = build_definitions([spec])
    """

RUN_CONFIG = """
    ops:
      images__stream:
        config:
          images__LoadImages:
            delay: 0.02
            pid_dir: {pid_dir}
            runtime: {{num_workers: 2, device: cpu}}
    """


def test_terminate_stops_the_stream_and_its_workers(tmp_path, nodes, dagster_home):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    wf = _images_workflow(tmp_path, tmp_path / "trace.txt", 4000)
    (tmp_path / "defs.py").write_text(textwrap.dedent(DEFS.format(wf=str(wf), nodes=str(nodes))))
    (tmp_path / "run.yaml").write_text(textwrap.dedent(RUN_CONFIG.format(pid_dir=pid_dir)))
    (Path(dagster_home) / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DAGSTER_HOME": dagster_home, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagster",
            "job",
            "execute",
            "-f",
            str(tmp_path / "defs.py"),
            "-j",
            "images",
            "-c",
            str(tmp_path / "run.yaml"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while (
            not (tmp_path / "trace.txt").exists()
            or "reduce" not in (tmp_path / "trace.txt").read_text()
        ):
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the stream never reached the consumer"
            time.sleep(0.1)
        started_s = time.monotonic() - deadline + 90
        tree = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            for p in [proc.pid] + tree:
                try:
                    os.kill(p, signal.SIGABRT)
                except OSError:
                    pass
            time.sleep(2)
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(proc.stdout.read().decode()[-12000:]) from None
        stopped_s = time.monotonic() - t0
        output = proc.stdout.read().decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(
        f"\nstream reached the consumer {started_s:.1f} s after launch; "
        f"run stopped {stopped_s:.2f} s after SIGTERM"
    )
    assert stopped_s < 20, output[-3000:]
    time.sleep(1)
    alive = [
        p
        for p in tree
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == [], f"processes outlived the terminated run: {alive}"
    lines = _lines(tmp_path / "trace.txt")
    assert sum(line.startswith("reduce") for line in lines) < 4000, output[-2000:]
    assert lines[-1] == "on_end reduce failed=True"  # every step's on_end ran on the way out
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        (run,) = instance.get_runs()
        assert run.status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE), run.status


def test_a_long_stream_keeps_nothing_per_note_that_has_left(tmp_path, run_wf):
    """An endless source streamed through a batch step into a sink that stores nothing: what the
    stream keeps per note (ids, order, counters, progress, inboxes, the batch driver's
    bookkeeping) must go once the note has left, or memory grows until the OOM killer ends a
    night's stream. Python's heap traced between the 5,000th and the 40,000th note stays
    flat (under 10 bytes a note; a kept note costs some 0.3 KB)."""
    import tracemalloc

    nodes = copy_nodes(tmp_path / "long_nodes", "long_nodes.py", "streamed_long")
    report = tmp_path / "traced.txt"
    first, last = 5_000, 40_000
    wf = write_workflow(
        tmp_path,
        "endless",
        [
            step_node("src", "Endless", {"n": last + 1}, source=True),
            step_node("dbl", "Double", label="Double"),
            step_node(
                "drop",
                "DropPayload",
                {"marks": f"{first},{last}", "report": str(report)},
                outputs=[],
            ),
        ],
        [edge("src", "out", "dbl"), edge("dbl", "out", "drop")],
    )
    params = {"Double.runtime.num_workers": 0, "Double.runtime.device": "cpu"}
    try:
        run = run_wf(wf, [nodes], params, streaming=True)
    finally:
        tracemalloc.stop()
    assert run.success, run.failure
    traced = dict(map(int, line.split()) for line in report.read_text().splitlines())
    assert set(traced) == {first, last}, traced
    grown = traced[last] - traced[first]
    assert grown < 10 * (last - first), f"{grown} bytes kept over {last - first} notes"


def test_a_stream_says_when_a_stored_pin_holds_many_notes(
    tmp_path, run_wf, dagster_home, monkeypatch
):
    """A stored sink's notes stay in memory until the stream ends (they are its asset): in a
    stream that runs on, they are what grows. A warning names the step and the pin at
    ``KEPT_WARN_NOTES`` held, and again at each tenfold."""
    from dagster_graphbook.execution.step import stream

    monkeypatch.setattr(stream, "KEPT_WARN_NOTES", 50)
    nodes = copy_nodes(tmp_path / "long_nodes", "long_nodes.py", "streamed_long")
    wf = write_workflow(
        tmp_path,
        "kept",
        [
            step_node("src", "Endless", {"n": 1000}, source=True),
            step_node("dbl", "Double", label="Double"),  # its pin is the stored sink
        ],
        [edge("src", "out", "dbl")],
    )
    params = {"Double.runtime.num_workers": 0, "Double.runtime.device": "cpu"}
    run = run_wf(wf, [nodes], params, streaming=True)
    assert run.success, run.failure
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        said = [
            r.user_message
            for r in instance.all_logs(run.run_id)
            if r.level == 30 and "are held in memory" in (r.user_message or "")
        ]
    # at 50 and at 500 of the 1,000 notes, each once the chunk of 64 that passed it has left
    held = [int(re.search(r"(\d+) notes of pin 'out'", m).group(1)) for m in said]  # type: ignore[union-attr]
    assert 50 <= held[0] < 50 + 64 and 500 <= held[1] < 500 + 64 and len(held) == 2, said
    assert all("step 'Double'" in m for m in said), said
