"""Workflow files in Graphbook's editor format, built in a test: nodes, edges, node files, and the
small workflows several test modules run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tests.support.nodes import copy_nodes


def step_node(
    node_id: str,
    name: str,
    params: Optional[Dict[str, Any]] = None,
    *,
    label: Optional[str] = None,
    source: bool = False,
    outputs: Optional[List[str]] = None,
    **extra: Any,
) -> dict:
    """A ``step`` node as the editor saves it (``params`` are values; stored as ``{"value":
    v}``)."""
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


def resource_node(
    node_id: str, name: str, params: Optional[Dict[str, Any]] = None, *, label: Optional[str] = None
) -> dict:
    data: Dict[str, Any] = {
        "name": name,
        "category": "Util",
        "parameters": {k: {"type": "any", "value": v} for k, v in (params or {}).items()},
    }
    if label is not None:
        data["label"] = label
    return {"id": node_id, "type": "resource", "position": {"x": 0, "y": 0}, "data": data}


def edge(
    src: str, src_pin: str, dst: str, dst_pin: str = "in", edge_id: Optional[str] = None
) -> dict:
    return {
        "id": edge_id or f"e-{src}{src_pin}-{dst}{dst_pin}",
        "source": src,
        "sourceHandle": src_pin,
        "target": dst,
        "targetHandle": dst_pin,
        "data": {},
    }


def write_workflow(folder: Path, name: str, nodes: List[dict], edges: List[dict]) -> Path:
    path = folder / f"{name}.json"
    path.write_text(
        json.dumps({"version": "0", "type": "workflow", "nodes": nodes, "edges": edges}, indent=2)
    )
    return path


def write_nodes(folder: Path, filename: str, code: str) -> Path:
    """Write a custom node file (dedented) into ``folder`` and return the folder. For node code
    that is meant to be broken or is made per test; working node code lives in tests/nodes/
    (``copy_nodes``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(textwrap.dedent(code))
    return folder


def parent_of_a_step(tmp_path: Path, run_wf: Any, **run: Any) -> Tuple[Any, str, str]:
    """Run a one-step workflow of tests/nodes/parent_process.py (``run`` goes to ``run_wf``):
    the run, and the step process's parent's command line and memory map."""
    nodes = copy_nodes(tmp_path / "nodes", "parent_nodes.py", "parent_process")
    out = tmp_path / "parent.txt"
    wf = write_workflow(
        tmp_path, "parent", [step_node("1", "Parent", {"out": str(out)}, source=True)], []
    )
    result = run_wf(wf, [nodes], **run)
    if not result.success:
        return result, "", ""
    cmd, mapped = out.read_text().split("\n", 1)
    return result, cmd, mapped


def chain_workflow(folder: Path, steps: int, name: str, labelled: bool = False) -> Path:
    """``steps`` steps in a row (``Start``, then ``Inc`` nodes of tests/nodes/chain.py, labelled
    ``Inc<i>`` if asked)."""
    nodes = [step_node("0", "Start", {}, source=True)] + [
        step_node(str(i), "Inc", {}, label=f"Inc{i}" if labelled else None) for i in range(1, steps)
    ]
    edges = [edge(str(i - 1), "out", str(i)) for i in range(1, steps)]
    return write_workflow(folder, name, nodes, edges)
