"""Shared fixtures: the repository root, a throwaway DAGSTER_HOME, workflow-file builders and a run helper."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def dagster_home(tmp_path: Path) -> str:
    home = tmp_path / "dagster_home"
    home.mkdir()
    return str(home)


@pytest.fixture
def run_wf(dagster_home: str):
    """``run_wf(workflow, custom_nodes=[...], params={...}, **kw)`` against the test's own DAGSTER_HOME."""
    from dagster_graphbook import run_workflow

    def run(workflow: Any, custom_nodes: Iterable[Any] = (), params: Optional[Dict[str, Any]] = None, **kwargs: Any):
        kwargs.setdefault("dagster_home", dagster_home)
        return run_workflow(workflow, custom_nodes=list(custom_nodes), params=params or {}, **kwargs)

    return run


# ---------------------------------------------------------------------------------------------
# Builders for workflow files in Graphbook's editor format


def step_node(node_id: str, name: str, params: Optional[Dict[str, Any]] = None, *, label: Optional[str] = None, source: bool = False, outputs: Optional[List[str]] = None, **extra: Any) -> dict:
    """A ``step`` node as the editor saves it (``params`` are values; stored as ``{"value": v}``)."""
    data: Dict[str, Any] = {
        "name": name,
        "category": "",
        "parameters": {k: {"type": "any", "value": v} for k, v in (params or {}).items()},
        "inputs": [] if source else ["in"],
        "outputs": outputs or ["out"],
        "isCollapsed": False,
        "module": "transient_module",
    }
    if label is not None:
        data["label"] = label
    return {"id": node_id, "type": "step", "position": {"x": 0, "y": 0}, "data": data, **extra}


def resource_node(node_id: str, name: str, params: Optional[Dict[str, Any]] = None, *, label: Optional[str] = None) -> dict:
    data: Dict[str, Any] = {"name": name, "category": "Util", "parameters": {k: {"type": "any", "value": v} for k, v in (params or {}).items()}}
    if label is not None:
        data["label"] = label
    return {"id": node_id, "type": "resource", "position": {"x": 0, "y": 0}, "data": data}


def edge(src: str, src_pin: str, dst: str, dst_pin: str = "in", edge_id: Optional[str] = None) -> dict:
    return {"id": edge_id or f"e-{src}{src_pin}-{dst}{dst_pin}", "source": src, "sourceHandle": src_pin, "target": dst, "targetHandle": dst_pin, "data": {}}


def write_workflow(folder: Path, name: str, nodes: List[dict], edges: List[dict]) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"version": "0", "type": "workflow", "nodes": nodes, "edges": edges}, indent=2))
    return path


def write_nodes(folder: Path, filename: str, code: str) -> Path:
    """Write a custom node file (dedented) into ``folder`` and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(textwrap.dedent(code))
    return folder


@pytest.fixture
def wf_builders():
    """The builders above, for tests that prefer a fixture over an import."""
    return dict(step_node=step_node, resource_node=resource_node, edge=edge, write_workflow=write_workflow, write_nodes=write_nodes)
