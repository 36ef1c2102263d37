"""Groups, subflows and export nodes resolved the way Graphbook's editor does before a run.

Graphbook 0.13.3 never runs the saved file: its editor flattens it (``serializeForAPI`` in
``web/src/graph.ts``) and posts only steps and resources. This module does the same on the
saved JSON: group and subflow handles are followed to the steps behind them, subflow files are
inlined with ids ``"<subflow id>/<id>"``, and top-level export nodes (a workflow meant to be used
as a subflow) are ignored. What comes out is plain step/resource nodes and edges, and any node of
an unknown type as it was (the loader reports it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

_INNER = "_inner"


@dataclass
class _Ref:
    node: str
    slot: str
    inner: bool = False


@dataclass
class _Entry:
    type: str
    raw: Dict[str, Any] = field(default_factory=dict)
    inputs: List[_Ref] = field(default_factory=list)
    params: Dict[str, _Ref] = field(default_factory=dict)
    export_in: Dict[str, List[_Ref]] = field(default_factory=dict)
    export_out: Dict[str, List[_Ref]] = field(default_factory=dict)
    parent: str = ""
    handle: str = ""


@dataclass
class Flat:
    """The runnable part of a workflow file: step/resource nodes, edges, and what was ignored."""

    nodes: List[Dict[str, Any]]
    edges: List[Dict[str, Any]]
    notices: List[str]


def needs_flattening(data: Dict[str, Any]) -> bool:
    return any(
        isinstance(n, dict) and n.get("type") in ("group", "subflow", "export")
        for n in data.get("nodes", [])
    )


def flatten(data: Dict[str, Any], folder: Path, source: str) -> Flat:
    """Flatten ``data`` (a saved workflow); subflow files are looked up relative to ``folder``."""
    notices: List[str] = []
    entries: Dict[str, _Entry] = {}
    top_exports = _serialize(data, "", entries, folder, notices, source, depth=0)
    for handle, refs in top_exports.items():
        for ref in refs:
            notices.append(
                f"export node output {handle} (from node {ref.node} pin {ref.slot!r}) is "
                "ignored: top-level exports only matter when this workflow is a subflow"
            )
    nodes: List[Dict[str, Any]] = []
    edges: List[Dict[str, Any]] = []
    for nid, entry in entries.items():
        if entry.type not in ("step", "resource"):
            if entry.raw:  # an unknown type: kept, so the loader names it as without a group
                nodes.append({**entry.raw, "id": nid})
            continue
        nodes.append({**entry.raw, "id": nid})
        if entry.type == "step":
            for src, pin in _resolve_inputs(entry.inputs, entries):
                edges.append(_edge(src, pin, nid, "in"))
            params = _resolve_params(entry.params, entries)
        else:
            params = {k: (r.node, r.slot) for k, r in entry.params.items()}
        for key, (src, pin) in params.items():
            edges.append(_edge(src, pin, nid, key))
    return Flat(nodes, edges, notices)


def _edge(src: str, pin: str, dst: str, handle: str) -> Dict[str, Any]:
    return {
        "id": f"{src}:{pin}->{dst}:{handle}",
        "source": src,
        "sourceHandle": pin,
        "target": dst,
        "targetHandle": handle,
    }


def _serialize(
    data: Dict[str, Any],
    prefix: str,
    entries: Dict[str, _Entry],
    folder: Path,
    notices: List[str],
    source: str,
    depth: int,
) -> Dict[str, List[_Ref]]:
    outputs: Dict[str, List[_Ref]] = {}
    counts = {"input": 0, "output": 0}
    for raw in data.get("nodes", []):
        if not isinstance(raw, dict) or "id" not in raw:
            continue
        nid, ntype = prefix + str(raw["id"]), raw.get("type")
        ndata = raw.get("data") or {}
        if ntype == "export":
            kind = "input" if ndata.get("exportType") == "input" else "output"
            entries[nid] = _Entry("export", parent=prefix[:-1], handle=str(counts[kind]))
            counts[kind] += 1
        elif ntype == "subflow":
            sub = _subflow(ndata.get("filename"), folder, nid, notices, source, depth)
            if sub is None:
                continue
            sub_outputs = _serialize(sub, nid + "/", entries, folder, notices, source, depth + 1)
            entries[nid] = _Entry("subflow", export_out=sub_outputs)
        elif ntype == "group":
            entries[nid] = _Entry("group")
        else:  # step, resource, or an unknown type the loader reports
            entries[nid] = _Entry(str(ntype), raw=raw)
    for edge in data.get("edges", []):
        if not isinstance(edge, dict):
            continue
        src, dst = prefix + str(edge.get("source")), prefix + str(edge.get("target"))
        if src not in entries or dst not in entries:
            continue
        handle, target = str(edge.get("sourceHandle") or ""), str(edge.get("targetHandle") or "")
        inner = handle.endswith(_INNER)
        ref = _Ref(src, handle[: -len(_INNER)] if inner else handle, inner)
        node = entries[dst]
        if node.type == "export":
            outputs.setdefault(node.handle, []).append(ref)
        elif node.type == "step" and target == "in":
            node.inputs.append(ref)
        elif node.type in ("step", "resource"):
            node.params[target] = ref
        elif node.type == "group" and target.endswith(_INNER):
            node.export_out.setdefault(target[: -len(_INNER)], []).append(_Ref(src, ref.slot, True))
        elif node.type == "group":
            node.export_in.setdefault(target, []).append(_Ref(src, ref.slot, False))
        elif node.type == "subflow":
            node.export_in.setdefault(target, []).append(ref)
    return outputs


def _subflow(
    filename: Any, folder: Path, nid: str, notices: List[str], source: str, depth: int
) -> Optional[Dict[str, Any]]:
    if depth > 16:
        raise ValueError(
            f"{source}: subflow node {nid}: subflows nested more than 16 deep "
            "(does a subflow include itself?)"
        )
    path = folder / str(filename or "")
    try:
        sub = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        notices.append(
            f"subflow node {nid}: cannot read {path} ({exc}); Graphbook's editor skips "
            "such a subflow, so it is left out"
        )
        return None
    return sub if isinstance(sub, dict) else None


def _through(ref: _Ref, entries: Dict[str, _Entry]) -> Optional[List[_Ref]]:
    """The refs behind a group, subflow or export handle; None when ``ref`` is not such a handle."""
    node, slot = ref.node, ref.slot
    entry = entries[node]
    if (entry.type == "group" and ref.inner) or entry.type == "export":
        if entry.type == "export":
            node, slot = entry.parent, entry.handle
            if not node or node not in entries:
                return []
        return entries[node].export_in.get(slot, [])
    if entry.type in ("group", "subflow"):
        return entry.export_out.get(slot, [])
    return None


def _resolve_inputs(refs: List[_Ref], entries: Dict[str, _Entry]) -> List[Tuple[str, str]]:
    out: List[Tuple[str, str]] = []
    for ref in refs:
        if ref.node not in entries:
            continue
        behind = _through(ref, entries)
        if behind is not None:
            out += _resolve_inputs(behind, entries)
        elif entries[ref.node].type == "step":
            out.append((ref.node, ref.slot))
    return out


def _resolve_params(
    params: Dict[str, _Ref], entries: Dict[str, _Entry]
) -> Dict[str, Tuple[str, str]]:
    out: Dict[str, Tuple[str, str]] = {}
    for key, ref in params.items():
        hops = 0
        while ref.node in entries and entries[ref.node].type != "resource" and hops < 64:
            behind = _through(ref, entries)
            if not behind:
                break
            ref, hops = _Ref(behind[0].node, behind[0].slot, behind[0].inner), hops + 1
        if ref.node in entries and entries[ref.node].type == "resource":
            out[key] = (ref.node, ref.slot)
    return out
