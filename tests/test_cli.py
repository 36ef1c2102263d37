"""`dagster-graphbook run / validate` as a user types them."""

from __future__ import annotations

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
