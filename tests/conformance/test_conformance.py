"""Differential conformance: Graphbook programs under Dagster must match real Graphbook 0.13.3.

Each folder under ``cases/`` is a small Graphbook program written in this repository in the
shape of one upstream program (the wheel's sample, the examples, the docs, a plugin, the
built-in nodes). ``golden/<case>.json`` holds what real Graphbook 0.13.3 emitted for it: every
note of every step and pin, in order, as JSON (so ``10`` and ``10.0`` differ). Regenerate with
``tests/conformance/record_golden.py`` (see its docstring); CI only reads the golden files.

A case is either *equal* (our notes, per step and pin, are the golden ones, in the same order) or
a *deliberate difference* (``"difference"`` in its ``case.json``, listed in
``docs/graphbook-differences.md``): the golden file shows Graphbook's defect, and ours runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import dagster as dg
import pytest

from dagster_graphbook import load_workflow, run_workflow
from dagster_graphbook.model.registry import NodeRegistry
from dagster_graphbook.plan.translator import GraphbookTranslator
from dagster_graphbook.runner.instance import get_instance

HERE = Path(__file__).resolve().parent
CASES = sorted(p.name for p in (HERE / "cases").iterdir() if (p / "case.json").is_file())


def _case(name: str) -> Dict[str, Any]:
    return json.loads((HERE / "cases" / name / "case.json").read_text())


def _golden(name: str) -> Dict[str, Any]:
    return json.loads((HERE / "golden" / f"{name}.json").read_text())


def _canonical(notes: Dict[str, Dict[str, List[Any]]]) -> Dict[str, Dict[str, str]]:
    """Step id -> pin -> JSON text of the notes (empty pins left out): types and order count."""
    return {
        step: {pin: json.dumps(v, sort_keys=True, default=repr) for pin, v in pins.items() if v}
        for step, pins in notes.items()
        if any(pins.values())
    }


def _run_ours(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dict[str, Any]:
    case_dir = tmp_path / name
    import shutil

    shutil.copytree(HERE / "cases" / name, case_dir)
    monkeypatch.chdir(case_dir)  # steps that read or write relative files do it here
    monkeypatch.syspath_prepend(str(case_dir))  # Graphbook puts the workflow folder on sys.path
    meta = _case(name)
    workflow_path = case_dir / meta["workflow"]
    nodes = [case_dir / "custom_nodes"]
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = get_instance(str(home))
    run = run_workflow(workflow_path, custom_nodes=nodes, instance=instance)
    assert run.success, f"{name}: our run failed: {run.failure}"
    registry = NodeRegistry.load(nodes) if workflow_path.suffix == ".json" else None
    workflow = load_workflow(workflow_path, registry, search_path=nodes)
    names = GraphbookTranslator().step_names(workflow)
    by_id = {nid: run.notes[names[nid]] for nid in names if names[nid] in run.notes}
    metadata: Dict[str, Dict[str, Any]] = {}
    for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        mat = record.asset_materialization
        metadata[mat.asset_key.path[1]] = {k: v.value for k, v in mat.metadata.items()}
    files = {
        f: (case_dir / f).read_text() if (case_dir / f).exists() else None
        for f in meta.get("files", [])
    }
    for module in [m for m in sys.modules if m == "plugin_pkg" or m.startswith("plugin_pkg.")]:
        monkeypatch.delitem(sys.modules, module)
    return {
        "notes": by_id,
        "workflow": workflow,
        "names": names,
        "metadata": metadata,
        "files": files,
    }


def _golden_notes(golden: Dict[str, Any]) -> Dict[str, Dict[str, List[Any]]]:
    return golden["outputs"]


@pytest.mark.parametrize("name", [c for c in CASES if "difference" not in _case(c)])
def test_equal_to_graphbook(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    golden = _golden(name)
    assert golden["load_error"] is None and not golden["errors"], (
        f"{name}: the reference run failed; mark the case a difference"
    )
    ours = _run_ours(name, tmp_path, monkeypatch)
    expected = _canonical(_golden_notes(golden))
    # pins the step does not declare: Graphbook keeps them in its queues; we drop and count them
    dropped = _case(name).get("dropped", {})
    for step, pins in dropped.items():
        for pin, count in pins.items():
            assert len(golden["outputs"][step][pin]) == count
            del expected[step][pin]
            meta = ours["metadata"][ours["names"][step]]
            assert meta[f"notes_dropped_{pin}"] == count
        if not expected[step]:
            del expected[step]  # the step emitted only to pins it does not declare
    assert _canonical(ours["notes"]) == expected
    assert ours["files"] == golden["files"]


@pytest.mark.parametrize("name", [c for c in CASES if "difference" in _case(c)])
def test_deliberate_difference(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Graphbook fails (its golden shows the error); ours runs, and gives what the case states.

    With ``"note_items"`` the statement is Graphbook's too: what its classes emitted once the
    defect was worked around in the recording (``record_golden.ItemsNote``).
    """
    golden, meta = _golden(name), _case(name)
    if meta.get("note_items"):
        assert golden["note_items"]["load_error"] is None and not golden["note_items"]["errors"]
        meta["ours"] = golden["note_items"]["outputs"]
    assert (
        golden["load_error"]
        or golden["errors"]
        or _canonical(golden["outputs"]) != _canonical(meta["ours"])
    ), f"{name}: Graphbook shows no defect here"
    ours = _run_ours(name, tmp_path, monkeypatch)
    assert ours["notes"], f"{name}: our run emitted nothing"
    got, stated, reference = (
        _canonical(ours["notes"]),
        _canonical(meta["ours"]),
        _canonical(golden["outputs"]),
    )
    for step in set(stated) | set(reference):  # stated where Graphbook fails; the rest as Graphbook
        assert got.get(step) == stated.get(step, reference.get(step)), f"{name}: step {step}"
    listed = (HERE.parents[1] / "docs" / "graphbook-differences.md").read_text()
    assert f"conformance case `{name}`" in listed, (
        f"{name}: list the difference in docs/graphbook-differences.md"
    )


def test_golden_files_match_cases() -> None:
    """Every case has a golden file recorded by real Graphbook 0.13.3 (and no stale ones)."""
    goldens = sorted(p.stem for p in (HERE / "golden").glob("*.json") if p.stem != "import_surface")
    assert goldens == CASES
    for name in CASES:
        golden = _golden(name)
        assert golden["graphbook"] == "0.13.3" and golden["case"] == name
