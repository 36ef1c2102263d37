"""``dg`` (dagster-dg-cli) on this repository and on a new project, run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

import pytest
from upath import UPath

from dagster_graphbook.store.versions import read_notes, stored_notes_path
from tests.support.paths import REPO

DG = Path(sys.executable).parent / "dg"


def _dg(args: List[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "VIRTUAL_ENV": sys.prefix,
        "DAGSTER_HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = subprocess.run(
        [str(DG), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"dg {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "dagster_home"
    path.mkdir()
    (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return path


def test_dg_check_and_list_defs_in_the_repository(home):
    checked = _dg(["check", "defs"], REPO, home)
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr
    listed = json.loads(_dg(["list", "defs", "--json"], REPO, home).stdout)
    jobs = {j["name"] for j in listed["jobs"]}
    assert {"nightly_shapes", "sample", "word_split"} <= jobs
    checks = {c["key"] for c in listed["asset_checks"]}
    assert "nightly_shapes/ClassifyShapes:accuracy_min_0_9" in checks
    assets = {a["asset_key"]: a for a in listed["assets"]}
    assert assets["nightly_shapes/ClassifyShapes"]["source"].startswith(
        "custom_nodes/nightly/nightly_nodes.py:"
    )


PROJECT_DEFINITIONS = """
from pathlib import Path

import dagster as dg


@dg.definitions
def defs():
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A new dg project (what ``create-dagster project`` lays out), with no definitions yet."""
    root = tmp_path / "proj"
    (root / "proj_pkg" / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [project]
        name = "proj"
        version = "0.0.0"

        [tool.dg]
        directory_type = "project"

        [tool.dg.project]
        root_module = "proj_pkg"
        """)
    )
    (root / "proj_pkg" / "__init__.py").write_text("")
    (root / "proj_pkg" / "defs" / "__init__.py").write_text("")
    (root / "proj_pkg" / "definitions.py").write_text(PROJECT_DEFINITIONS)
    return root


def test_dg_scaffold_a_starter_and_an_existing_workflow_then_launch(project, home):
    comp = "dagster_graphbook.GraphbookWorkflowComponent"
    _dg(["scaffold", "defs", comp, "my_flow"], project, home)
    folder = project / "proj_pkg" / "defs" / "my_flow"
    assert sorted(p.name for p in folder.iterdir()) == ["defs.yaml", "nodes.py", "workflow.json"]
    # the starter shows the JSON of a resource node wired to a step's parameter
    starter = json.loads((folder / "workflow.json").read_text())
    (factor,) = [n for n in starter["nodes"] if n["type"] == "resource"]
    assert factor["data"]["name"] == "Factor"
    wired = [e for e in starter["edges"] if e["sourceHandle"] == "resource"]
    assert [(e["source"], e["target"], e["targetHandle"]) for e in wired] == [
        (factor["id"], "1", "factor")
    ]

    sample = {
        "workflow": str(REPO / "workflows" / "sample.json"),
        "custom_nodes": [str(REPO / "custom_nodes" / "sample")],
    }
    _dg(
        ["scaffold", "defs", comp, "sample_copy", "--json-params", json.dumps(sample)],
        project,
        home,
    )
    copied = project / "proj_pkg" / "defs" / "sample_copy"
    assert [p.name for p in copied.iterdir()] == ["defs.yaml"]
    assert str(REPO / "workflows" / "sample.json") in (copied / "defs.yaml").read_text()

    listed = json.loads(_dg(["list", "defs", "--json"], project, home).stdout)
    assert {j["name"] for j in listed["jobs"]} == {"my_flow", "sample"}
    assets = {a["asset_key"]: a for a in listed["assets"]}
    assert assets["my_flow/Double"]["dependency_keys"] == ["my_flow/Numbers"]
    assert assets["my_flow/Double"]["source"].startswith("proj_pkg/defs/my_flow/nodes.py:")

    _dg(["launch", "--job", "my_flow"], project, home)
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        assert [(r.job_name, r.status) for r in runs] == [("my_flow", dg.DagsterRunStatus.SUCCESS)]
        kind = dg.DagsterEventType.ASSET_MATERIALIZATION
        events = instance.all_logs(runs[0].run_id, of_type=kind)
        notes = {
            e.asset_materialization.asset_key.to_user_string(): e.asset_materialization.metadata[
                "dagster/row_count"
            ].value
            for e in events
        }
        (doubled,) = [e for e in events if e.asset_materialization.asset_key.path[-1] == "Double"]
        stored = stored_notes_path(doubled.asset_materialization.metadata)
    assert notes == {"my_flow/Numbers": 10, "my_flow/Double": 10}
    values = [n["value"] for n in read_notes(UPath(stored), dg.AssetKey(["my_flow", "Double"]))]
    assert values == [2 * i for i in range(10)]  # times the Factor resource's value


def test_component_fields_carry_descriptions_and_examples():
    from dagster_graphbook import GraphbookWorkflowComponent

    schema = GraphbookWorkflowComponent.get_model_cls().model_json_schema()
    props = schema["properties"]
    missing = [name for name, p in props.items() if not p.get("description")]
    assert not missing, f"component fields without a description: {missing}"
    assert props["workflow"]["examples"] == ["../../workflows/nightly_shapes.json", "workflow.json"]
    assert props["checks"]["examples"][0][0]["metric"] == "accuracy"


def _run_cli(args: List[str], cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess:
    """``dg`` / ``dagster`` as a user runs them; the exit code is the caller's to judge."""
    full_env = {
        **{k: v for k, v in os.environ.items() if k != "DAGSTER_GRAPHBOOK_STRICT"},
        "VIRTUAL_ENV": sys.prefix,
        "DAGSTER_HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **env,
    }
    exe = Path(sys.executable).parent / args[0]
    return subprocess.run(
        [str(exe), *args[1:]], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300
    )


COMPONENT = """\
type: dagster_graphbook.GraphbookWorkflowComponent
attributes:
  workflow: {workflow}
  custom_nodes: [{nodes}]
"""


def test_strict_setting_fails_dg_check_and_definitions_validate_on_a_broken_workflow(project, home):
    """By default a workflow that fails to load is only logged (the rest of the code
    location stays loaded, the broken one is a failing job), so the checks pass; with
    DAGSTER_GRAPHBOOK_STRICT=1, or ``strict: true`` on the component, they fail naming the file."""
    defs = project / "proj_pkg" / "defs"
    sample = (REPO / "workflows" / "sample.json").read_text()
    nodes = REPO / "custom_nodes" / "sample"
    for name, text in (("good", sample), ("broken", sample.replace("GenerateNumbers", "GenNums"))):
        (defs / name).mkdir()
        (defs / name / f"{name}.json").write_text(text)
        (defs / name / "defs.yaml").write_text(
            COMPONENT.format(workflow=f"{name}.json", nodes=nodes)
        )
    broken = str(defs / "broken" / "broken.json")
    checks = (["dg", "check", "defs"], ["dagster", "definitions", "validate"])

    for args in checks:
        default = _run_cli(args, project, home)
        said = default.stdout + default.stderr
        assert default.returncode == 0, said  # the good workflow keeps the location loaded
        assert f"workflow {broken} is invalid" in said  # ... and the error is logged
        strict = _run_cli(args, project, home, DAGSTER_GRAPHBOOK_STRICT="1")
        said = strict.stdout + strict.stderr
        assert strict.returncode != 0, said
        assert f"workflow {broken} is invalid" in said and "unknown step 'GenNums'" in said

    listed = json.loads(_dg(["list", "defs", "--json"], project, home).stdout)
    assert {j["name"] for j in listed["jobs"]} == {"good", "broken"}  # broken: a failing job

    with open(defs / "broken" / "defs.yaml", "a") as f:
        f.write("  strict: true\n")
    attribute = _run_cli(checks[0], project, home)
    assert attribute.returncode != 0 and broken in attribute.stdout + attribute.stderr


def test_strict_defaults_to_the_environment(tmp_path, monkeypatch):
    from dagster_graphbook import build_definitions
    from dagster_graphbook.model.workflow import WorkflowError

    wf = tmp_path / "broken.json"
    wf.write_text((REPO / "workflows" / "sample.json").read_text().replace("Transform", "Tx"))
    nodes = [REPO / "custom_nodes" / "sample"]
    monkeypatch.delenv("DAGSTER_GRAPHBOOK_STRICT", raising=False)
    defs = build_definitions([wf], custom_nodes=nodes)
    assert defs.resolve_job_def("broken").description.startswith("FAILED TO LOAD:")
    monkeypatch.setenv("DAGSTER_GRAPHBOOK_STRICT", "1")
    with pytest.raises(WorkflowError, match="unknown step 'Tx'"):
        build_definitions([wf], custom_nodes=nodes)
    assert build_definitions([wf], custom_nodes=nodes, strict=False).resolve_job_def("broken")
    monkeypatch.setenv("DAGSTER_GRAPHBOOK_STRICT", "maybe")
    with pytest.raises(ValueError, match="DAGSTER_GRAPHBOOK_STRICT='maybe': set it to 1"):
        build_definitions([wf], custom_nodes=nodes)
