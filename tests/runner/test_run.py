"""Real runs through Dagster (``run_workflow``) against a temporary DAGSTER_HOME, and try-outs
(``dagster-graphbook run``) kept apart from the code location's runs."""

from __future__ import annotations

import hashlib
import random
import re
import sys
from pathlib import Path
from typing import Dict

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, WorkflowError, build_definitions, run_workflow
from dagster_graphbook.cli.main import main
from tests.support.nodes import copy_nodes
from tests.support.paths import REPO
from tests.support.workflows import (
    edge,
    parent_of_a_step,
    resource_node,
    step_node,
    write_workflow,
)

K = dg.AssetKey


def _user_messages(instance, run_id, step_key=None):
    return [
        e.user_message
        for e in instance.all_logs(run_id)
        if step_key is None or e.step_key == step_key
    ]


def _metadata(instance, key):
    event = instance.get_latest_materialization_event(key)
    assert event is not None, f"{key} was never materialized"
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


# ---------------------------------------------------------------------------------------------
# The sample workflow, run once for this module


@pytest.fixture(scope="module")
def sample_home(tmp_path_factory):
    return str(tmp_path_factory.mktemp("sample_home"))


@pytest.fixture(scope="module")
def sample_instance(sample_home):
    from dagster_graphbook.runner.instance import get_instance

    instance = get_instance(sample_home)
    yield instance
    instance.dispose()


@pytest.fixture(scope="module")
def sample_run(repo, sample_instance):
    run = run_workflow(
        repo / "workflows" / "sample.json",
        custom_nodes=[repo / "custom_nodes" / "sample"],
        instance=sample_instance,
    )
    assert run.success, run.failure
    return run


def test_sample_counts(sample_run):
    counts = sample_run.counts()
    assert counts["GenerateNumbers"] == {"out": 200}
    assert counts["Transform"] == {"out": 200}
    assert counts["CalcMean"] == {"out": 200}
    assert counts["CalcRunningMean"] == {"out": 200}
    assert counts["Split"]["A"] + counts["Split"]["B"] == 200
    assert counts["Split"]["A"] > 0 and counts["Split"]["B"] > 0


def test_sample_values(sample_run):
    gen = sample_run.notes["GenerateNumbers"]["out"]
    trans = sample_run.notes["Transform"]["out"]
    assert all(len(n["numbers"]) == 4 and all(0 <= x <= 10 for x in n["numbers"]) for n in gen)
    # Transform (scale 2, shift 1 in the workflow) in order, and the stored parent is untouched
    assert [n["numbers"] for n in trans] == [[2 * x + 1 for x in n["numbers"]] for n in gen]
    means = sample_run.notes["CalcMean"]["out"]
    assert all(n["mean"] == pytest.approx(sum(n["numbers"]) / 4) for n in means)
    a, b = sample_run.notes["Split"]["A"], sample_run.notes["Split"]["B"]
    assert all(n["mean"] > 10 for n in a)
    assert all(n["mean"] <= 10 for n in b)
    assert a == [n for n in means if n["mean"] > 10]
    assert (
        "mean" not in sample_run.notes["CalcRunningMean"]["out"][0]
    )  # sibling of CalcMean: own copy


def test_sample_on_end_log_in_event_log(sample_run, sample_instance):
    messages = _user_messages(sample_instance, sample_run.run_id, "sample__CalcRunningMean")
    lines = [m for m in messages if m.startswith("running_mean=")]
    assert len(lines) == 1  # on_end runs once per run
    match = re.fullmatch(r"running_mean=(\S+) count=(\d+)", lines[0])
    assert match and int(match.group(2)) == 200
    means = [n["mean"] for n in sample_run.notes["CalcMean"]["out"]]
    assert float(match.group(1)) == pytest.approx(sum(means) / len(means))


def test_sample_materialization_metadata(sample_run, sample_instance):
    meta = _metadata(sample_instance, K(["sample", "Split", "A"]))
    assert meta["notes_in"] == 200
    assert meta["dagster/row_count"] == len(sample_run.notes["Split"]["A"])
    assert meta["errors_skipped"] == 0


def test_rematerialize_one_downstream_asset_from_stored_parents(repo, sample_run, sample_instance):
    defs = build_definitions(
        [
            GraphbookWorkflow(
                repo / "workflows" / "sample.json", custom_nodes=[repo / "custom_nodes" / "sample"]
            )
        ]
    )
    job = defs.resolve_job_def("sample")
    split_keys = [K(["sample", "Split", "A"]), K(["sample", "Split", "B"])]
    result = job.execute_in_process(
        instance=sample_instance, asset_selection=split_keys, raise_on_error=False
    )
    assert result.success
    assert {e.step_key for e in result.get_step_success_events()} == {"sample__Split"}
    means = sample_run.notes["CalcMean"]["out"]
    assert result.output_for_node("sample__Split", "A") == [n for n in means if n["mean"] > 10]
    assert result.output_for_node("sample__Split", "B") == [n for n in means if n["mean"] <= 10]
    # upstream assets were read, not recomputed
    gen_records = sample_instance.fetch_materializations(
        K(["sample", "GenerateNumbers"]), limit=10
    ).records
    split_records = sample_instance.fetch_materializations(
        K(["sample", "Split", "A"]), limit=10
    ).records
    assert len(gen_records) == 1
    assert len(split_records) == 2
    with defs.get_asset_value_loader(instance=sample_instance) as loader:
        assert loader.load_asset_value(K(["sample", "Split", "B"])) == [
            n for n in means if n["mean"] <= 10
        ]


# ---------------------------------------------------------------------------------------------
# Parameters through run config


def test_params_override_through_run_config(repo, run_wf):
    run = run_wf(
        repo / "workflows" / "sample.json",
        custom_nodes=[repo / "custom_nodes" / "sample"],
        params={
            "GenerateNumbers.amount": 7,
            "GenerateNumbers.seed": 0,
            "Transform.scale": 3,
            "Transform.shift": 0,
        },
    )
    assert run.success, run.failure
    gen = run.notes["GenerateNumbers"]["out"]
    assert len(gen) == 7
    assert run.counts()["CalcMean"] == {"out": 7}
    assert sum(run.counts()["Split"].values()) == 7
    assert [n["numbers"] for n in run.notes["Transform"]["out"]] == [
        [3 * x for x in n["numbers"]] for n in gen
    ]
    rng = random.Random(0)  # seed 0 is a seed, not "unset"
    assert [n["numbers"] for n in gen] == [[rng.randint(0, 10) for _ in range(4)] for _ in range(7)]


def test_bad_param_reference_is_rejected(repo, run_wf):
    with pytest.raises(WorkflowError, match="NoSuchStep"):
        run_wf(
            repo / "workflows" / "sample.json",
            custom_nodes=[repo / "custom_nodes" / "sample"],
            params={"NoSuchStep.amount": 1},
        )


# ---------------------------------------------------------------------------------------------
# The other shipped workflows


def test_simple_functional(repo, run_wf, dagster_home):
    run = run_wf(
        repo / "workflows" / "simple_functional.json",
        custom_nodes=[repo / "custom_nodes" / "simple_functional"],
        params={"MyFirstStep.seed": 0},
    )
    assert run.success, run.failure
    assert run.counts()["MyFirstSource"] == {"out": 10}
    a, b = run.notes["MyFirstStep"]["A"], run.notes["MyFirstStep"]["B"]
    assert len(a) + len(b) == 10
    rng = random.Random(0)
    expected_a = [i for i in range(10) if rng.random() < 0.5]  # prob = the Number resource, 0.5
    assert [n["i"] for n in a] == expected_a
    assert sorted(n["i"] for n in a + b) == list(range(10))
    assert a[0]["message"] == f"Hello, World! {expected_a[0]}/10"
    messages = _user_messages(
        dg.DagsterInstance.from_config(dagster_home), run.run_id, "simple_functional__MyFirstStep"
    )
    assert "Hello, World! 0/10" in messages  # the on_data hook's ctx.log


def test_simple_class(repo, run_wf):
    run = run_wf(
        repo / "workflows" / "simple_class.json",
        custom_nodes=[repo / "custom_nodes" / "simple_class"],
    )
    assert run.success, run.failure
    assert run.counts()["MyFirstSource"] == {"message": 10}
    a, b = run.notes["MyFirstStep"]["A"], run.notes["MyFirstStep"]["B"]
    assert len(a) + len(b) == 10
    assert sorted(n["i"] for n in a + b) == list(range(10))
    assert all(n["message"] == "Hello, World!" for n in a + b)


def test_sample_graph_py(repo, run_wf):
    run = run_wf(
        repo / "workflows" / "sample_graph.py",
        custom_nodes=[repo / "custom_nodes" / "sample"],
        params={"GenerateNumbers.amount": 20},
    )
    assert run.success, run.failure
    counts = run.counts()
    assert set(counts) == {"GenerateNumbers", "Transform", "CalcMean", "CalcRunningMean", "Split"}
    assert counts["Transform"] == {"out": 20}
    assert counts["Split"]["A"] + counts["Split"]["B"] == 20
    assert all(n["mean"] > 10 for n in run.notes["Split"]["A"])
    gen, trans = run.notes["GenerateNumbers"]["out"], run.notes["Transform"]["out"]
    assert [n["numbers"] for n in trans] == [[2 * x + 1 for x in n["numbers"]] for n in gen]


def test_graph_object_run(repo, run_wf):
    from dagster_graphbook import NodeRegistry
    from dagster_graphbook.authoring import Graph, resources
    from dagster_graphbook.authoring.steps import Split

    registry = NodeRegistry.load([repo / "custom_nodes" / "sample"])
    g = Graph()
    g.name = "inline_graph"
    gen = g.step(registry.steps["GenerateNumbers"]).param("amount", 5).param("seed", 3)
    mean = g.step(registry.steps["CalcMean"]).bind(gen)
    fn = g.resource(resources.FunctionResource).param(
        "val", "def f(d):\n    return d['mean'] > 5\n"
    )
    g.step(Split).param("split_fn", fn).bind(mean)
    run = run_wf(g)
    assert run.success, run.failure
    assert run.counts()["GenerateNumbers"] == {"out": 5}
    split = run.notes["Split"]
    assert [n["mean"] > 5 for n in split["A"]] == [True] * len(split["A"])
    assert len(split["A"]) + len(split["B"]) == 5


# ---------------------------------------------------------------------------------------------
# Failures


@pytest.fixture
def failing(tmp_path):
    nodes = copy_nodes(tmp_path / "failing_nodes", "failing.py", "failing_steps")
    marker = tmp_path / "marker.txt"
    path = write_workflow(
        tmp_path,
        "failing",
        [step_node("1", "Numbers", source=True), step_node("2", "Boom", {"marker": str(marker)})],
        [edge("1", "out", "2")],
    )
    return path, nodes, marker


def _failure_chain(instance, run_id):
    """The STEP_FAILURE errors of a run, each with its chain of causes, as text."""
    out = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        error, parts = record.dagster_event.step_failure_data.error, []
        while error is not None:
            parts.append(error.message)
            error = error.cause
        out[record.step_key] = "\n".join(parts)
    return out


def test_step_raising_fails_run_naming_workflow_step_and_note(failing, run_wf, dagster_home):
    path, nodes, marker = failing
    run = run_wf(path, custom_nodes=[nodes])
    assert not run.success
    assert run.notes == {}
    chain = _failure_chain(dg.DagsterInstance.from_config(dagster_home), run.run_id)
    assert set(chain) == {"failing__Boom"}
    assert (
        "workflow 'failing', step 'Boom' (node 2): failed on note 3 {'i': 3}: "
        "ValueError: cannot handle 3" in chain["failing__Boom"]
    )
    # on_end ran although the step failed
    assert marker.read_text() == "end\n"


def test_run_failure_message_names_workflow_step_and_note(failing, run_wf):
    """``WorkflowRun.failure`` is what a caller of run_workflow sees: it must say what failed."""
    path, nodes, _ = failing
    run = run_wf(path, custom_nodes=[nodes])
    assert not run.success
    msg = run.failure
    assert "failing__Boom" in msg
    assert "workflow 'failing'" in msg
    assert "step 'Boom' (node 2)" in msg
    assert "note 3" in msg and "{'i': 3}" in msg
    assert "ValueError: cannot handle 3" in msg


def test_on_item_error_skip_records_and_continues(failing, run_wf, dagster_home):
    path, nodes, marker = failing
    run = run_wf(path, custom_nodes=[nodes], params={"Boom.runtime.on_item_error": "skip"})
    assert run.success, run.failure
    assert [n["i"] for n in run.notes["Boom"]["out"]] == [0, 1, 2, 4, 5]
    assert all(n["ok"] for n in run.notes["Boom"]["out"])
    instance = dg.DagsterInstance.from_config(dagster_home)
    meta = _metadata(instance, K(["failing", "Boom"]))
    assert meta["errors_skipped"] == 1
    assert meta["notes_in"] == 6
    rows = meta["errors"].records
    assert (
        len(rows) == 1 and rows[0].data["note"] == 3 and "cannot handle 3" in rows[0].data["error"]
    )
    warnings = [m for m in _user_messages(instance, run.run_id, "failing__Boom") if "skipped" in m]
    assert len(warnings) == 1 and "note 3" in warnings[0]
    assert marker.read_text() == "end\n"


SKIP = {  # params: skip failed items (at most the default share of them)
    "Check.runtime.on_item_error": "skip",
    "Check.runtime.num_workers": 0,
    "Check.runtime.device": "cpu",
}
SKIP_LIMIT = {"runtime": {"max_skipped_fraction": 0.2}}  # run config: 1 of 3 is over it


@pytest.fixture
def one_bad_in_three(tmp_path):
    nodes = copy_nodes(tmp_path / "batch_nodes", "checks.py", "run_batch")
    path = write_workflow(
        tmp_path,
        "skips",
        [step_node("1", "Items", source=True), step_node("2", "Check")],
        [edge("1", "out", "2")],
    )
    return path, nodes


@pytest.mark.parametrize("streaming", [False, True], ids=["default", "streaming"])
def test_run_config_of_a_step_that_params_also_set_is_kept(one_bad_in_three, run_wf, streaming):
    """``params`` setting ``Check.runtime.on_item_error`` and ``run_config`` setting the same
    op's ``runtime.max_skipped_fraction``: both hold (params replaced the op's whole block, so
    the limit was gone and 33% skipped passed)."""
    path, nodes = one_bad_in_three
    run = run_wf(
        path,
        custom_nodes=[nodes],
        params=SKIP,
        run_config={"ops": {"skips__Check": {"config": SKIP_LIMIT}}},
        streaming=streaming,
    )
    assert not run.success
    assert "1 of 3 items (33%) were skipped" in run.failure, run.failure
    assert "max_skipped_fraction 0.2" in run.failure


def test_graph_run_keeps_run_config_of_a_step_that_params_also_set(one_bad_in_three, dagster_home):
    from dagster_graphbook import NodeRegistry
    from dagster_graphbook.authoring import Graph

    _, nodes = one_bad_in_three
    registry = NodeRegistry.load([nodes])
    g = Graph()
    g.name = "skipping"
    items = g.step(registry.steps["Items"])
    g.step(registry.steps["Check"]).bind(items)
    with pytest.raises(RuntimeError, match=r"1 of 3 items \(33%\) were skipped"):
        g.run(
            params=SKIP,
            run_config={"ops": {"skipping__Check": {"config": SKIP_LIMIT}}},
            dagster_home=dagster_home,
        )


def test_source_failure_names_the_step_and_progress(failing, run_wf, dagster_home):
    path, nodes, marker = failing
    run = run_wf(path, custom_nodes=[nodes], params={"Numbers.break_at": 2})
    assert not run.success
    chain = _failure_chain(dg.DagsterInstance.from_config(dagster_home), run.run_id)
    assert set(chain) == {"failing__Numbers"}
    assert (
        "workflow 'failing', step 'Numbers' (node 1): load failed after 2 notes: "
        "RuntimeError: source ran dry" in chain["failing__Numbers"]
    )
    assert not marker.exists()  # the downstream step never ran


# ---------------------------------------------------------------------------------------------
# The multiprocess executor (one run: it is slow)


def test_multiprocess_executor_sample(repo, run_wf, dagster_home):
    run = run_wf(
        repo / "workflows" / "sample.json",
        custom_nodes=[repo / "custom_nodes" / "sample"],
        executor="multiprocess",
        params={"GenerateNumbers.amount": 30},
    )
    assert run.success, run.failure
    counts = run.counts()
    assert counts["Transform"] == {"out": 30}
    assert counts["Split"]["A"] + counts["Split"]["B"] == 30
    assert all(n["mean"] > 10 for n in run.notes["Split"]["A"])
    instance = dg.DagsterInstance.from_config(dagster_home)
    steps = {
        e.step_key for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
    }
    assert steps == {
        f"sample__{s}"
        for s in ("GenerateNumbers", "Transform", "CalcMean", "CalcRunningMean", "Split")
    }
    assert any(
        m.startswith("running_mean=") and m.endswith("count=30")
        for m in _user_messages(instance, run.run_id)
    )


@pytest.mark.parametrize("chosen", [{}, {"start_method": {"spawn": {}}}], ids=["plain", "spawn"])
def test_multiprocess_picked_in_the_launchpad_forks_steps_from_the_preloaded_server(
    tmp_path, run_wf, chosen
):
    """``execution: {config: {multiprocess: {}}}`` (the launchpad's choice) starts step processes
    from the forkserver that preloaded torch and the package; a start_method the run names wins."""
    run, parent, _ = parent_of_a_step(
        tmp_path,
        run_wf,
        executor="multiprocess",
        run_config={"execution": {"config": {"multiprocess": chosen}}},
    )
    assert run.success, run.failure
    if chosen:
        assert "forkserver" not in parent, parent  # spawned by the run's own process
    else:
        assert "forkserver" in parent, parent


# ---------------------------------------------------------------------------------------------
# Built-in IO steps in a workflow


def test_load_and_dump_jsonl_workflow_rerun_does_not_duplicate(tmp_path, run_wf):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(f'{{"k": {i}}}\n' for i in range(5)))
    dst = tmp_path / "out" / "copy.jsonl"
    path = write_workflow(
        tmp_path,
        "jsonl_copy",
        [
            step_node("1", "LoadJSONL", {"start_from": 1}, source=True),
            step_node("2", "DumpJSONL"),
            resource_node("3", "Text", {"val": str(src)}, label="InPath"),
            resource_node("4", "Text", {"val": str(dst)}, label="OutPath"),
        ],
        [
            edge("1", "out", "2"),
            edge("3", "resource", "1", "jsonl_path"),
            edge("4", "resource", "2", "jsonl_path"),
        ],
    )
    for _ in range(2):
        run = run_wf(path)
        assert run.success, run.failure
        assert [n["k"] for n in run.notes["DumpJSONL"]["out"]] == [1, 2, 3, 4]
        assert dst.read_text().splitlines() == [f'{{"k": {i}}}' for i in range(1, 5)]
    assert sorted(p.name for p in dst.parent.iterdir()) == ["copy.jsonl"]


# ---------------------------------------------------------------------------------------------
# ``dagster-graphbook run`` try-outs stay apart from the code location: after ``materialize``
# recorded the location's job, a try-out of the same workflow with other parameters leaves the
# location's latest materializations and stored notes as they were; ``--record`` records there.

SAMPLE = REPO / "workflows" / "sample.json"
SAMPLE_NODES = REPO / "custom_nodes" / "sample"
KEY = dg.AssetKey(["sample", "GenerateNumbers"])


def _files(folder: Path) -> Dict[str, str]:
    """Every file under ``folder`` (relative path -> sha256 of its bytes)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _latest(home: Path) -> Dict[dg.AssetKey, str]:
    """The run id of each asset's latest materialization in the instance at ``home``."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        keys = instance.get_asset_keys()
        return {k: instance.get_latest_materialization_event(k).run_id for k in keys}


@pytest.fixture
def location(tmp_path, monkeypatch):
    """A code location module with the sample workflow (notes in its instance's storage, as the
    repository's own code location), and DAGSTER_HOME pointing at its instance."""
    (tmp_path / "tryout_defs.py").write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(SAMPLE)!r}, "
        f"custom_nodes=[{str(SAMPLE_NODES)!r}])])\n"
    )
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield home
    sys.modules.pop("tryout_defs", None)


def _cli(capsys, *argv: str) -> str:
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_tryout_leaves_the_code_locations_assets_and_notes_alone(location, tmp_path, capsys):
    home = location
    out = _cli(
        capsys,
        "materialize",
        "sample",
        "--module",
        "tryout_defs",
        "--set",
        "GenerateNumbers.amount=7",
    )
    location_run = re.search(r"run (\S+): SUCCESS", out).group(1)
    latest, notes = _latest(home), _files(home / "storage" / "graphbook")
    assert latest[KEY] == location_run and notes

    args = ["run", str(SAMPLE), "--custom-nodes", str(SAMPLE_NODES), "--no-progress"]
    out = _cli(capsys, *args, "--set", "GenerateNumbers.amount=5", "--set", "Transform.scale=9")
    tryout_run = re.search(r"run (\S+): SUCCESS", out).group(1)
    assert "GenerateNumbers  out: 5 notes" in out
    assert _latest(home) == latest  # the location's latest materializations are its own
    assert _files(home / "storage" / "graphbook") == notes  # its stored notes untouched
    tryouts = tmp_path / ".dagster_graphbook" / "tryouts"
    assert f"Dagster instance: {tryouts} " in out and str(home) in out
    said = Path(re.search(r"^Notes: (.+)$", out, re.M).group(1))
    assert said == tryouts / "storage" / "graphbook"
    stored = [p for p in said.rglob(f"{tryout_run}*") if p.is_file()]
    assert {p.parent.relative_to(said).parts for p in stored} >= {("sample", "GenerateNumbers")}
    assert _latest(tryouts)[KEY] == tryout_run

    out = _cli(capsys, *args, "--set", "GenerateNumbers.amount=3", "--record")
    recorded = re.search(r"run (\S+): SUCCESS", out).group(1)
    assert _latest(home)[KEY] == recorded  # asked for: recorded into the location's instance
    assert f"Notes: {home / 'storage' / 'graphbook'}" in out and "Try-out" not in out


def test_run_workflow_without_a_home_is_a_tryout(location, tmp_path):
    from dagster_graphbook import run_workflow

    run = run_workflow(SAMPLE, [SAMPLE_NODES], {"GenerateNumbers.amount": 4})
    assert run.success and len(run["GenerateNumbers"]["out"]) == 4
    assert _latest(tmp_path / ".dagster_graphbook" / "tryouts")[KEY] == run.run_id
    assert not (location / "history").exists()  # nothing recorded in the location's instance
    recorded = run_workflow(SAMPLE, [SAMPLE_NODES], record=True)
    assert _latest(location)[KEY] == recorded.run_id


def test_an_error_raised_inside_the_package_is_placed_at_the_users_line(tmp_path):
    """The headline's ``at FILE, line N`` is the user's innermost frame: frames of any module of
    this package are not the user's, wherever the package lives (an editable install keeps it in
    the checkout, outside site-packages). Only ``runner/`` counted before."""
    import dagster_graphbook
    from dagster_graphbook.runner.failure import raised_at as _raised_at

    package = Path(dagster_graphbook.__file__).resolve().parent
    user = tmp_path / "my_nodes.py"
    user.write_text("")
    traceback_text = "\n".join(
        [
            "Traceback (most recent call last):",
            f'  File "{package / "execution" / "driver.py"}", line 250, in _feed_notes',
            "    routed = self.step(note)",
            f'  File "{user}", line 7, in on_data',
            "    note['y'] = ctx.missing",
            f'  File "{package / "authoring" / "steps.py"}", line 120, in __getattr__',
            "    raise AttributeError(name)",
            "AttributeError: missing",
        ]
    )
    assert _raised_at(traceback_text) == f"{user}, line 7, in on_data"
