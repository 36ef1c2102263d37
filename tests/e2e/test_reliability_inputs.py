"""Reliability under bad input: bad workflows not covered in tests/model/ and
tests/authoring/test_compat.py, bad items through real runs (real JPEGs decoded in DataLoader
worker processes), and the trust rule for ``function`` parameters (run config may replace code
only where the workflow marks it)."""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from dagster_graphbook.authoring import Graph
from dagster_graphbook.model.registry import NodeRegistry
from dagster_graphbook.model.workflow import WorkflowError, load_workflow
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_nodes, write_workflow

PROCESS_WORKERS = {"num_workers": 2, "worker_type": "process", "device": "cpu"}


def _runtime(step: str, **settings) -> dict:
    return {f"{step}.runtime.{k}": v for k, v in settings.items()}


def _metadata(dagster_home: str, key: list) -> dict:
    event = dg.DagsterInstance.from_config(dagster_home).get_latest_materialization_event(
        dg.AssetKey(key)
    )
    assert event is not None, f"no materialization of {key}"
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def _skipped_rows(md: dict) -> list:
    return [row.data for row in md["errors"].records] if "errors" in md else []


# ---------------------------------------------------------------------------------------------
# Bad workflows (the cases tests/model/ and tests/authoring/test_compat.py do not already cover)

GOOD_AND_BROKEN = {
    "good.py": """
        from graphbook.steps import SourceStep, Step

        class Count(SourceStep):
            def load(self):
                return {"out": [{"i": i} for i in range(3)]}

        class Double(Step):
            def on_data(self, data):
                data["i2"] = data["i"] * 2
        """,
    "broken.py": """
        from graphbook.steps import Step
        import math

        value = math.sqrt(-1)   # line 5: fails at import

        class Broken(Step):
            pass
        """,
}


def _nodes_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "nodes"
    for name, code in GOOD_AND_BROKEN.items():
        write_nodes(folder, name, code)
    return folder


def test_broken_node_file_in_a_code_location_other_workflows_still_load(tmp_path, run_wf, caplog):
    """A code location whose shared custom_nodes folder holds a file that fails to import: the
    workflows that do not need it load and run, the import error is logged with file and line,
    and a workflow that needs the broken node fails at load naming its file, node and that line."""
    folder = _nodes_folder(tmp_path)
    good = write_workflow(
        tmp_path,
        "good_flow",
        [step_node("1", "Count", source=True), step_node("2", "Double")],
        [edge("1", "out", "2")],
    )
    needs_broken = write_workflow(
        tmp_path,
        "broken_flow",
        [step_node("1", "Count", source=True), step_node("2", "Broken")],
        [edge("1", "out", "2")],
    )
    location = tmp_path / "location.py"
    location.write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(good)!r}, "
        f"custom_nodes=[{str(folder)!r}])])\n"
    )
    spec = importlib.util.spec_from_file_location("reliability_location", location)
    module = importlib.util.module_from_spec(spec)
    with caplog.at_level(logging.WARNING, logger="dagster_graphbook"):
        spec.loader.exec_module(module)  # as Dagster's code server imports a definitions file
    defs: dg.Definitions = module.defs
    assert defs.resolve_job_def("good_flow") is not None
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"{folder / 'broken.py'}, line 5" in logged and "ValueError: math domain error" in logged

    run = run_wf(good, custom_nodes=[folder])
    assert run.success, run.failure
    assert [n["i2"] for n in run.notes["Double"]["out"]] == [0, 2, 4]

    both = [
        GraphbookWorkflow(good, custom_nodes=[folder]),
        GraphbookWorkflow(needs_broken, custom_nodes=[folder]),
    ]
    with pytest.raises(WorkflowError) as info:
        build_definitions(both, strict=True)
    message = str(info.value)
    assert str(needs_broken) in message and "node 2" in message and "'Broken'" in message
    assert f"{folder / 'broken.py'}, line 5" in message

    # by default the code location keeps the good workflow; the broken one is a job saying why
    defs = build_definitions(both)
    assert defs.resolve_job_def("good_flow") is not None
    broken = defs.resolve_job_def("broken_flow")
    assert message in broken.description and broken.description.startswith("FAILED TO LOAD")
    with dg.instance_for_test() as instance:
        result = broken.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert f"{folder / 'broken.py'}, line 5" in failure.step_failure_data.error.message + str(
        failure.step_failure_data.user_failure_data.description
    )


EXITING_NODES = """
    import sys

    from graphbook.steps import SourceStep


    class Quits(SourceStep):
        def load(self):
            return {"out": [{"i": 1}]}


    {exit}   # line 12: ends the program at import
    """
CLI = [sys.executable, "-m", "dagster_graphbook.cli"]


@pytest.mark.parametrize("exit", ["sys.exit(0)", "raise BaseException('bye')"])
def test_node_file_ending_the_program_at_import_is_a_load_error_everywhere(tmp_path, exit):
    """A node file calling ``sys.exit(0)`` at import made ``validate`` exit 0 printing nothing
    (nothing was validated) and ``run`` end silently. Any BaseException short of
    KeyboardInterrupt is a load error naming the file and line: in ``validate``, ``run``, a
    code location (``build_definitions``; the component:
    tests/defs/component/test_component.py); the other files still load."""
    folder = _nodes_folder(tmp_path)
    write_nodes(folder, "quits.py", EXITING_NODES.replace("{exit}", exit))
    quits = folder / "quits.py"
    wf = write_workflow(tmp_path, "quitting", [step_node("1", "Quits", source=True)], [])
    good = write_workflow(
        tmp_path,
        "good_flow",
        [step_node("1", "Count", source=True), step_node("2", "Double")],
        [edge("1", "out", "2")],
    )
    for command in (["validate"], ["run", "--no-progress", "--dagster-home", str(tmp_path / "h")]):
        proc = subprocess.run(
            [*CLI, command[0], str(wf), "--custom-nodes", str(folder), *command[1:]],
            capture_output=True,
            text=True,
            timeout=300,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, (command, out)
        assert f"{quits}, line 12 failed to import" in out and "'Quits'" in out, out
        assert "Traceback" not in out, out
    if exit.startswith("sys.exit"):
        assert "called sys.exit(0) while being imported" in out, out
    proc = subprocess.run(
        [*CLI, "validate", str(good), "--custom-nodes", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "OK (2 steps" in proc.stdout, proc.stdout + proc.stderr
    assert f"{quits}, line 12 failed to import" in proc.stderr  # still said, as a warning

    # the code location: the workflow is a job that says why; the other one loads
    defs = build_definitions([wf, good], custom_nodes=[folder])
    assert defs.resolve_job_def("good_flow") is not None
    broken = defs.resolve_job_def("quitting").description
    assert broken.startswith("FAILED TO LOAD") and f"{quits}, line 12" in broken, broken


def test_a_python_workflow_ending_the_program_at_import_is_a_load_error(tmp_path):
    """The same for a ``.py`` workflow file: ``validate`` names it instead of exiting 0."""
    wf = tmp_path / "quits_flow.py"
    wf.write_text("import sys\nsys.exit(0)\n")
    proc = subprocess.run([*CLI, "validate", str(wf)], capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and str(wf) in out, out
    assert "the Python workflow failed to import: it called sys.exit(0)" in out, out


def test_two_workflows_of_one_name_are_refused_naming_both_files(tmp_path):
    """``MyFlow.json`` and ``sub/my_flow.json`` are both ``my_flow``: Dagster refused the code
    location with ``Duplicate asset key: AssetKey(['my_flow', 'Count'])``, naming neither file.
    The refusal names both files and how to rename; with ``name=`` both load."""
    folder = _nodes_folder(tmp_path)
    nodes = [step_node("1", "Count", source=True)]
    first = write_workflow(tmp_path, "MyFlow", nodes, [])
    (tmp_path / "sub").mkdir()
    second = write_workflow(tmp_path / "sub", "my_flow", nodes, [])
    for strict in (False, True):
        with pytest.raises(dg.DagsterInvalidDefinitionError) as info:
            build_definitions([first, second], custom_nodes=[folder], strict=strict)
        message = str(info.value)
        assert f"workflows {first} and {second} both define job 'my_flow'" in message, message
        assert "name=" in message and "`name:`" in message, message
    renamed = [first, GraphbookWorkflow(second, custom_nodes=[folder], name="my_flow_2")]
    defs = build_definitions(renamed, custom_nodes=[folder])
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"my_flow", "my_flow_2"}
    assert set(defs.resolve_all_asset_keys()) == {
        dg.AssetKey(["my_flow", "Count"]),
        dg.AssetKey(["my_flow_2", "Count"]),
    }


def _bad(tmp_path: Path, nodes: list, edges: list, name: str = "bad") -> str:
    return str(write_workflow(tmp_path, name, nodes, edges))


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing_file", "cannot read the file"),
        ("edges_not_list", "'edges' must be a list"),
        ("node_without_name", "node 1 (?): missing data.name"),
        ("edge_not_object", "edges[0]: not an edge object"),
        ("step_used_as_resource", "'Double' is a step, but the node's type is 'resource'"),
        ("data_edge_into_parameter", "goes to handle 'factor' of node 2"),
        ("reserved_runtime_param", "parameter name 'runtime' is reserved"),
        ("overridable_not_bool", "'overridable' must be true or false, got 'yes'"),
        (
            "overridable_on_non_function",
            "parameter 'factor' is marked overridable, but only 'function' parameters",
        ),
    ],
)
def test_more_bad_workflows_name_file_and_node(tmp_path, case, expected):
    folder = write_nodes(
        tmp_path / "nodes",
        "nodes.py",
        """
        from graphbook.steps import SourceStep, Step

        class Count(SourceStep):
            def load(self):
                return {"out": [{"i": 1}]}

        class Double(Step):
            Parameters = {"factor": {"type": "number", "default": 2}}
            def __init__(self, factor=2):
                super().__init__()
                self.factor = factor

        class Reserved(Step):
            Parameters = {"runtime": {"type": "string", "default": "x"}}
            def __init__(self, runtime="x"):
                super().__init__()
        """,
    )
    registry = NodeRegistry.load([folder])
    src, dbl = step_node("1", "Count", source=True), step_node("2", "Double", {"factor": 3})
    good_edges = [edge("1", "out", "2")]
    if case == "missing_file":
        path = str(tmp_path / "nowhere.json")
    elif case == "edges_not_list":
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({"nodes": [src], "edges": {"a": 1}}))
    elif case == "node_without_name":
        del src["data"]["name"]
        path = _bad(tmp_path, [src, dbl], good_edges)
    elif case == "edge_not_object":
        path = _bad(tmp_path, [src, dbl], ["1->2"])
    elif case == "step_used_as_resource":
        path = _bad(
            tmp_path, [src, dbl, {**step_node("3", "Double"), "type": "resource"}], good_edges
        )
    elif case == "data_edge_into_parameter":
        path = _bad(tmp_path, [src, dbl], [edge("1", "out", "2", "factor")])
    elif case == "reserved_runtime_param":
        path = _bad(tmp_path, [src, step_node("2", "Reserved")], good_edges)
    else:
        dbl["data"]["parameters"]["factor"]["overridable"] = (
            "yes" if case == "overridable_not_bool" else True
        )
        path = _bad(tmp_path, [src, dbl], good_edges)
    with pytest.raises(WorkflowError) as info:
        if case == "reserved_runtime_param":  # found when the op's config schema is built
            build_definitions([GraphbookWorkflow(path, custom_nodes=[folder])], strict=True)
        else:
            load_workflow(path, registry)
    message = str(info.value)
    assert str(Path(path).resolve()) in message or str(path) in message
    assert expected in message


# ---------------------------------------------------------------------------------------------
# Bad items through real runs: JPEGs decoded by load_fn in DataLoader worker processes


def _jpeg(path: Path, size: int, seed: int) -> None:
    from PIL import Image

    Image.effect_noise((size, size), 40 + seed).convert("RGB").save(path, "JPEG")


@pytest.fixture
def image_case(tmp_path):
    """12 real JPEGs in 4 notes, plus a truncated JPEG, a missing file and an item of the wrong
    type."""
    nodes = copy_nodes(tmp_path / "image_nodes", "image_nodes.py", "image_inputs")
    images = tmp_path / "images"
    images.mkdir()
    good = []
    for i in range(12):
        p = images / f"img{i:02d}.jpg"
        _jpeg(p, 16 + i, i)
        good.append(str(p))
    corrupt = images / "corrupt.jpg"
    whole = io.BytesIO()
    from PIL import Image

    Image.effect_noise((64, 64), 50).convert("RGB").save(whole, "JPEG")
    corrupt.write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])  # a real JPEG cut in half
    missing = str(images / "missing.jpg")
    notes = [
        {"id": 0, "paths": good[0:3]},
        {"id": 1, "paths": [good[3], str(corrupt), good[4]]},
        {"id": 2, "paths": [good[5], missing, good[6], good[7]]},
        {"id": 3, "paths": [good[8], 42, good[9], good[10], good[11]]},
    ]
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(notes))
    wf = write_workflow(
        tmp_path,
        "images",
        [
            step_node("1", "Manifest", {"manifest": str(manifest)}, source=True),
            step_node("2", "ImageSizes"),
        ],
        [edge("1", "out", "2")],
    )
    return wf, nodes, notes, good, str(corrupt), missing


def test_bad_images_under_raise_fail_naming_the_first_bad_item(image_case, run_wf):
    wf, nodes, _, _, corrupt, _ = image_case
    run = run_wf(wf, custom_nodes=[nodes], params=_runtime("ImageSizes", **PROCESS_WORKERS))
    assert not run.success
    assert "workflow 'images', step 'ImageSizes' (node 2)" in run.failure
    assert f"load_fn failed on item {corrupt!r} (note 1, item 1)" in run.failure
    assert "OSError: image file is truncated" in run.failure


def test_bad_images_under_skip_every_bad_item_recorded_every_good_one_arrives(
    image_case, run_wf, dagster_home
):
    wf, nodes, notes, good, corrupt, missing = image_case
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params=_runtime("ImageSizes", on_item_error="skip", **PROCESS_WORKERS),
    )
    assert run.success, run.failure
    out = run.notes["ImageSizes"]["out"]
    assert [n["id"] for n in out] == [0, 1, 2, 3]  # notes with bad items still leave, in order
    arrived = {path: size for n in out for path, size in n["sizes"].items()}
    assert sorted(arrived) == sorted(good)
    for i, path in enumerate(good):
        assert arrived[path] == [3, 16 + i, 16 + i]
    md = _metadata(dagster_home, ["images", "ImageSizes"])
    assert md["errors_skipped"] == 3 and md["details"]["items_failed"] == 3 and md["items"] == 12
    rows = {(r["note"], r["item"].split(":")[0]): r for r in _skipped_rows(md)}
    assert set(rows) == {(1, "1"), (2, "1"), (3, "1")}
    assert (
        repr(corrupt) in rows[(1, "1")]["item"]
        and "image file is truncated" in rows[(1, "1")]["error"]
    )
    assert (
        repr(missing) in rows[(2, "1")]["item"] and "FileNotFoundError" in rows[(2, "1")]["error"]
    )
    assert rows[(3, "1")]["item"] == "1: 42" and "AttributeError" in rows[(3, "1")]["error"]
    assert all(r["stage"] == "load_fn" for r in rows.values())


@pytest.fixture
def thousand(tmp_path):
    nodes = copy_nodes(tmp_path / "image_nodes", "image_nodes.py", "image_inputs")
    notes = [
        {"id": n, "items": list(range(n * 50, n * 50 + 50))} for n in range(20)
    ]  # items 0..999
    manifest = tmp_path / "items_manifest.json"
    manifest.write_text(json.dumps(notes))
    wf = write_workflow(
        tmp_path,
        "thousand",
        [
            step_node("1", "Manifest", {"manifest": str(manifest)}, source=True),
            step_node("2", "Numbers"),
        ],
        [edge("1", "out", "2")],
    )
    return wf, nodes


def test_one_bad_item_in_a_thousand_under_raise_names_it(thousand, run_wf):
    wf, nodes = thousand
    run = run_wf(wf, custom_nodes=[nodes], params=_runtime("Numbers", **PROCESS_WORKERS))
    assert not run.success
    assert "step 'Numbers' (node 2)" in run.failure
    assert (
        "load_fn failed on item 637 (note 12, item 37)" in run.failure
        and "ValueError: cannot load 637" in run.failure
    )


def test_one_bad_item_in_a_thousand_under_skip_999_arrive(thousand, run_wf, dagster_home):
    wf, nodes = thousand
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params=_runtime("Numbers", on_item_error="skip", **PROCESS_WORKERS),
    )
    assert run.success, run.failure
    out = run.notes["Numbers"]["out"]
    assert [n["id"] for n in out] == list(range(20))
    loaded = [v for n in out for v in n["loaded"]]
    assert loaded == [i * 10 for i in range(1000) if i != 637]
    md = _metadata(dagster_home, ["thousand", "Numbers"])
    assert md["errors_skipped"] == 1 and md["items"] == 999 and md["details"]["items_failed"] == 1
    (row,) = _skipped_rows(md)
    assert (row["stage"], row["note"], row["item"]) == ("load_fn", 12, "37: 637")


def test_notes_without_items_or_not_dicts_are_named_or_skipped(tmp_path, run_wf, dagster_home):
    """A note without the item key, and a note that is not a dict at all."""
    nodes = copy_nodes(tmp_path / "image_nodes", "image_nodes.py", "image_inputs")
    manifest = tmp_path / "notes_manifest.json"
    manifest.write_text(
        json.dumps(
            [
                {"id": 0, "items": [1, 2]},
                {"id": 1, "itemz": [3]},
                {"id": 2, "items": [4]},
                "just text",
            ]
        )
    )
    wf = write_workflow(
        tmp_path,
        "wrong_notes",
        [
            step_node("1", "Manifest", {"manifest": str(manifest)}, source=True),
            step_node("2", "Numbers"),
        ],
        [edge("1", "out", "2")],
    )
    run = run_wf(wf, custom_nodes=[nodes], params=_runtime("Numbers", **PROCESS_WORKERS))
    assert not run.success
    assert (
        "step 'Numbers' (node 2): note 1 {'id': 1, 'itemz': [3]}: KeyError" in run.failure
        and "item_key 'items' not found" in run.failure
    )
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        params=_runtime("Numbers", on_item_error="skip", **PROCESS_WORKERS),
    )
    assert run.success, run.failure
    assert [(n["id"], n.get("loaded")) for n in run.notes["Numbers"]["out"]] == [
        (0, [10, 20]),
        (2, [40]),
    ]
    rows = _skipped_rows(_metadata(dagster_home, ["wrong_notes", "Numbers"]))
    assert [(r["stage"], r["note"]) for r in rows] == [("on_data", 1), ("on_data", 3)]
    assert (
        "KeyError" in rows[0]["error"]
        and "batch steps take dict-like notes, got str" in rows[1]["error"]
    )


# ---------------------------------------------------------------------------------------------
# Trust: function parameters run code; run config may replace one only where the workflow says so


TIMES_TEN = "def fn(x):\n    return x * 10"


@pytest.fixture
def function_case(tmp_path):
    nodes = copy_nodes(tmp_path / "trust_nodes", "trust_nodes.py", "function_inputs")

    def workflow(name: str, overridable=None) -> Path:
        apply = step_node("2", "Apply", {"fn": "def fn(x):\n    return x - 1"})
        if overridable is not None:
            apply["data"]["parameters"]["fn"]["overridable"] = overridable
        return write_workflow(
            tmp_path, name, [step_node("1", "Count", source=True), apply], [edge("1", "out", "2")]
        )

    return nodes, workflow


def test_run_config_replacing_function_code_is_refused(function_case, run_wf):
    nodes, workflow = function_case
    wf = workflow("locked")
    run = run_wf(wf, custom_nodes=[nodes], params={"Apply.fn": TIMES_TEN})
    assert not run.success
    assert "workflow 'locked', step 'Apply' (node 2)" in run.failure
    assert (
        "run config replaces the code of function parameter 'fn'" in run.failure
        and "does not mark overridable" in run.failure
    )
    # other parameters stay editable, and the workflow's own code runs
    run = run_wf(wf, custom_nodes=[nodes], params={"Apply.label": "edited"})
    assert run.success, run.failure
    assert [(n["y"], n["label"]) for n in run.notes["Apply"]["out"]] == [
        (-1, "edited"),
        (0, "edited"),
        (1, "edited"),
    ]
    # marked false is the same as not marked
    run = run_wf(
        workflow("explicit_false", overridable=False),
        custom_nodes=[nodes],
        params={"Apply.fn": TIMES_TEN},
    )
    assert not run.success and "function parameter 'fn'" in run.failure


def test_function_marked_overridable_in_the_workflow_file_accepts_run_config(function_case, run_wf):
    nodes, workflow = function_case
    run = run_wf(
        workflow("open", overridable=True), custom_nodes=[nodes], params={"Apply.fn": TIMES_TEN}
    )
    assert run.success, run.failure
    assert [n["y"] for n in run.notes["Apply"]["out"]] == [0, 10, 20]


def test_function_marked_overridable_in_a_python_graph(function_case, run_wf):
    nodes, _ = function_case
    registry = NodeRegistry.load([nodes])
    for overridable in (True, False):
        g = Graph()
        src = g.step(registry.steps["Count"])
        apply = g.step(registry.steps["Apply"]).param(
            "fn", "def fn(x):\n    return x - 1", overridable=overridable
        )
        apply.bind(src)
        g.name = f"graph_{str(overridable).lower()}"
        assert ("overridable" in g.serialize()["G"][apply.id]["parameters"]["fn"]) is overridable
        run = run_wf(g, params={"Apply.fn": TIMES_TEN})
        if overridable:
            assert run.success, run.failure
            assert [n["y"] for n in run.notes["Apply"]["out"]] == [0, 10, 20]
        else:
            assert not run.success
            assert (
                "step 'Apply' (node 1)" in run.failure and "function parameter 'fn'" in run.failure
            )


def test_code_location_flag_still_marks_functions_overridable(function_case, dagster_home):
    """``GraphbookWorkflow(overridable_functions=[...])`` keeps working next to the file marking."""
    nodes, workflow = function_case
    defs = build_definitions(
        [
            GraphbookWorkflow(
                workflow("by_location"), custom_nodes=[nodes], overridable_functions=["fn"]
            )
        ]
    )
    job = defs.resolve_job_def("by_location")
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = job.execute_in_process(
            run_config={"ops": {"by_location__Apply": {"config": {"fn": TIMES_TEN}}}},
            instance=instance,
        )
    assert result.success
    assert [n["y"] for n in result.output_for_node("by_location__Apply", "out")] == [0, 10, 20]


# ---------------------------------------------------------------------------------------------
# Pool sizes no machine can start, from run config


@pytest.mark.parametrize("setting", ["num_workers", "dump_workers"])
def test_a_pool_no_machine_can_start_is_refused_naming_the_step(tmp_path, dagster_home, setting):
    """``runtime.num_workers: 100000000`` from run config forked workers until the run was
    killed (and left some behind); now the step fails at once, naming the setting."""
    import os
    import signal
    import subprocess
    import sys

    import psutil

    nodes = copy_nodes(tmp_path / "nodes", "pool_nodes.py", "pool_inputs")
    wf = write_workflow(
        tmp_path,
        "pools",
        [step_node("0", "Items", {}, source=True), step_node("1", "Load", {})],
        [edge("0", "out", "1")],
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster_graphbook.cli", "run", str(wf), "--custom-nodes",
         str(nodes), "--dagster-home", dagster_home, "--no-progress",
         "--set", f"Load.runtime.{setting}=100000000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        out = "(still running after 60 s)"
    finally:
        leftover = [p for p in psutil.process_iter(["pid"]) if _in_group(p, proc.pid)]
        if proc.poll() is None or leftover:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 1, out[-3000:]
    assert (
        f"workflow 'pools', step 'Load' (node 1): runtime.{setting} must be between 0 and" in out
    ), out[-3000:]
    assert "got 100000000" in out
    assert leftover == []


def _in_group(process, pgid: int) -> bool:
    import os

    try:
        return os.getpgid(process.pid) == pgid
    except (ProcessLookupError, PermissionError):
        return False
