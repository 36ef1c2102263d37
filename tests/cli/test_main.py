"""`dagster-graphbook run / validate` as a user types them, and the live display of a run's
progress lines."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import dagster as dg

from dagster_graphbook.cli.main import LiveDisplay
from tests.support.nodes import node_file
from tests.support.paths import REPO

CLI = [sys.executable, "-m", "dagster_graphbook.cli"]


def test_validate_lists_assets():
    out = subprocess.run(
        [*CLI, "validate", "workflows/sample.json", "--custom-nodes", "custom_nodes/sample"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "OK (5 steps, 1 resources, 6 assets)" in out.stdout
    assert "asset sample/Split/A" in out.stdout


def test_validate_reports_bad_workflow(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"nodes": [{"id": "1", "type": "step", "data": {"name": "NoSuchStep"}}], "edges": []}'
    )
    out = subprocess.run(
        [*CLI, "validate", str(bad), "--custom-nodes", "custom_nodes/sample"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert (
        str(bad) in out.stderr
        and "node 1" in out.stderr
        and "NoSuchStep" in out.stderr
        and "GenerateNumbers" in out.stderr
    )


def test_validate_warns_about_an_unconnected_resource_parameter(tmp_path):
    """The nightly workflow with its model edge deleted: validate still says OK (the job loads)
    but first names the workflow, the step and the parameter; under DAGSTER_GRAPHBOOK_STRICT it
    fails with that message and no OK."""
    data = json.loads((REPO / "workflows" / "nightly_shapes.json").read_text())
    data["edges"] = [e for e in data["edges"] if e["targetHandle"] != "model"]
    path = tmp_path / "nightly_shapes.json"
    path.write_text(json.dumps(data))
    args = [*CLI, "validate", str(path), "--custom-nodes", "custom_nodes/nightly"]
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_GRAPHBOOK_STRICT"}
    out = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    said = f"warning: {path}: node 2 (ClassifyShapes): resource parameter 'model' is connected"
    assert said in out.stdout
    assert out.stdout.index(said) < out.stdout.index(": OK (")
    strict = subprocess.run(
        args,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "DAGSTER_GRAPHBOOK_STRICT": "1"},
    )
    assert strict.returncode == 1
    assert "OK" not in strict.stdout
    assert f"workflow {path} is invalid" in strict.stderr
    assert "node 2 (ClassifyShapes): resource parameter 'model'" in strict.stderr


def test_run_with_set_shows_progress_and_summary(tmp_path):
    out = subprocess.run(
        [
            *CLI,
            "run",
            "workflows/sample.json",
            "--custom-nodes",
            "custom_nodes/sample",
            "--set",
            "GenerateNumbers.amount=9",
            "--set",
            "GenerateNumbers.seed=0",
            "--dagster-home",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout
    assert "GenerateNumbers  out: 9 notes" in out.stdout
    assert (
        "▶ sample__Split" in out.stderr and "✔ sample__Split" in out.stderr
    )  # live display of the run's events
    assert (
        "running_mean=" in out.stderr
    )  # CalcRunningMean's on_end log, read back from the event log
    assert (tmp_path / "history" / "runs.db").exists()  # a persistent instance


def test_materialize_a_component_location_deployed_without_pyproject(tmp_path):
    """A code location folder copied to a server without pyproject.toml (a YAML component under
    ``definitions/``): ``materialize`` ended in Dagster's 'No project root with pyproject.toml or
    setup.py found' traceback; the current folder is the project root then."""
    import shutil

    site = tmp_path / "site"
    (site / "definitions" / "sample").mkdir(parents=True)
    (site / "definitions" / "__init__.py").write_text("")
    shutil.copytree(REPO / "custom_nodes" / "sample", site / "custom_nodes" / "sample")
    shutil.copy(REPO / "workflows" / "sample.json", site / "sample.json")
    (site / "definitions" / "sample" / "defs.yaml").write_text(
        "type: dagster_graphbook.GraphbookWorkflowComponent\n"
        "attributes:\n"
        "  workflow: ../../sample.json\n"
        "  custom_nodes: [../../custom_nodes/sample]\n"
    )
    assert not any((p / "pyproject.toml").exists() for p in [site, *site.parents])
    out = subprocess.run(
        [*CLI, "materialize", "sample", "--no-progress", "--dagster-home", str(tmp_path / "h")],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout and "Traceback" not in out.stderr, out.stdout + out.stderr


def _typed_location(tmp_path: Path) -> Path:
    """A workflow of one Typed step, and a code location module ``typed_location`` for it."""
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    shutil.copyfile(node_file("typed_params"), (nodes / "typed.py"))
    wf = tmp_path / "typed.json"
    wf.write_text(
        '{"nodes": [{"id": "1", "type": "step", "data": {"name": "Typed"}}], "edges": []}'
    )
    (tmp_path / "typed_location.py").write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(wf)!r}, "
        f"custom_nodes=[{str(nodes)!r}])])\n"
    )
    return wf


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args, "--no-progress", "--dagster-home", str(tmp_path / "home")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_set_values_are_read_as_the_parameters_types(tmp_path):
    """``--set Typed.text=2025-06-01``: YAML made a date and the run died with a
    DagsterInvalidConfigError traceback. A string parameter takes the text as typed; numbers,
    booleans and lists are parsed (a list of strings keeps its items as text); ``run`` and
    ``materialize`` read them alike."""
    wf = _typed_location(tmp_path)
    sets = {
        "Typed.text": "2025-06-01",
        "Typed.count": "3",
        "Typed.scale": "2.5",
        "Typed.flag": "true",
        "Typed.tags": "[2025-06-01, 007, yes]",
    }
    expected = {
        "text": ["2025-06-01", "str"],
        "count": [3, "int"],
        "scale": [2.5, "float"],
        "flag": [True, "bool"],
        "tags": [["2025-06-01", "007", "yes"], "list"],
    }
    run = ["run", str(wf), "--custom-nodes", str(tmp_path / "nodes")]
    for command in (run, ["materialize", "typed", "--module", "typed_location"]):
        dump = tmp_path / f"{command[0]}.json"
        args = [
            a for k, v in {**sets, "Typed.dump": str(dump)}.items() for a in ("--set", f"{k}={v}")
        ]
        proc = _cli(tmp_path, *command, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads(dump.read_text()) == expected, command
    # a value its type cannot take: one line naming the file, STEP.PARAM and the type wanted
    proc = _cli(tmp_path, *run, "--set", "Typed.count=2025-06-01")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"dagster-graphbook run {wf}: workflow {wf}: Typed.count takes an integer, not '2025-06-01'"
    ], proc.stderr


def test_partition_on_a_workflow_without_partitions_is_one_line(tmp_path):
    """``run <unpartitioned> --partition 2025-06-01`` ended in a CheckError traceback ("There
    is no PartitionsDefinition shared by all the provided assets"); ``materialize`` likewise."""
    wf = _typed_location(tmp_path)
    for command, what in (
        (["run", str(wf), "--custom-nodes", str(tmp_path / "nodes")], f"workflow {wf}"),
        (["materialize", "typed", "--module", "typed_location"], f"job typed (workflow {wf})"),
    ):
        proc = _cli(tmp_path, *command, "--partition", "2025-06-01")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"dagster-graphbook {' '.join(command[:2])}: {what} has no partitions: run it "
            "without a partition key (--partition)"
        ], proc.stderr
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        assert instance.get_runs() == []  # refused before any run


# ---------------------------------------------------------------------------------------------
# The live display: progress lines rewritten in place on a terminal


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


def test_strict_validate_fails_on_any_node_file_that_does_not_import(tmp_path):
    """Under DAGSTER_GRAPHBOOK_STRICT=1, a node file of the folder that calls ``sys.exit()`` at
    import passed ``validate`` ("OK", exit 0) as long as the workflow used none of its nodes, and
    the failure came after the "OK". Strict: exit 1, the file and line said, no verdict "OK";
    without it the workflow still validates, the failure said first as a warning."""
    import shutil

    nodes = tmp_path / "nodes"
    shutil.copytree(REPO / "custom_nodes" / "sample", nodes)
    (nodes / "quits.py").write_text('import sys\n\nsys.exit("not a node file")\n')
    args = [*CLI, "validate", "workflows/sample.json", "--custom-nodes", str(nodes)]
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_GRAPHBOOK_STRICT"}
    said = f"{nodes / 'quits.py'}, line 3 failed to import: it called sys.exit('not a node file')"

    strict = subprocess.run(
        args,
        cwd=REPO,
        env={**env, "DAGSTER_GRAPHBOOK_STRICT": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order it was written
        text=True,
        timeout=120,
    )
    assert strict.returncode == 1, strict.stdout
    assert said in strict.stdout and "strict" in strict.stdout, strict.stdout
    assert "OK" not in strict.stdout and "Traceback" not in strict.stdout, strict.stdout

    default = subprocess.run(
        args,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    assert default.returncode == 0, default.stdout
    assert -1 < default.stdout.find(said) < default.stdout.find(": OK ("), default.stdout
