"""``dagster-graphbook run`` try-outs stay apart from the code location: after ``materialize``
recorded the location's job, a try-out of the same workflow with other parameters leaves the
location's latest materializations and stored notes as they were; ``--record`` records there."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Dict

import dagster as dg
import pytest
from conftest import REPO

from dagster_graphbook.cli.main import main

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
