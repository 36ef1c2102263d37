"""`dagster-graphbook run / validate` as a user types them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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
