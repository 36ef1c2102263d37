"""Which steps a streaming op runs, and which of their pins store notes (the op itself is built
by ``assets.op_asset`` from ``plan.plan.compile_op``, as a step op is).

The segment is the whole workflow (``streaming=True``) or the steps a list names (a connected
part; the other steps keep an op each). Pins of steps outside the segment that a segment step
reads are the op's inputs, loaded through the notes IO manager and fed into the stream by an
inlet, one note at a time, as a source would.

Which pins store notes: a pin that no step of the segment reads (a sink, or a pin only steps
outside the segment read) goes through the notes IO manager as in the default mode (stored,
Parquet for flat sinks, re-materializable parents for other jobs). A pin read only inside the
segment is a ``Nothing`` output: its materialization carries the counts and figures but stores
no notes, which is what keeps memory bounded. The op cannot be subset: materializing any of its
assets runs the whole segment from its sources and inputs.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Set, Tuple, Union

from ..dagster_internals import deep_merge_dicts
from ..model.workflow import Workflow, WorkflowError
from .translator import GraphbookTranslator, WorkflowNames

# True: every step in one op; a list of step names (or labels, node ids): those steps
Streaming = Union[bool, Sequence[str]]


def segment_ids(workflow: Workflow, names: WorkflowNames, streaming: Streaming) -> List[str]:
    """The node ids of the streamed segment in topological order (``[]``: no streaming).

    A named segment must be connected, and no path may leave it and come back (the op outside
    would need the segment's output before the segment could run): both fail at load, naming
    the steps."""
    if streaming is True:
        return [n.id for n in workflow.steps()]
    if not streaming:
        return []
    wanted = [streaming] if isinstance(streaming, str) else list(streaming)
    refs = names.step_refs()
    unknown = [r for r in wanted if not isinstance(r, str) or r not in refs]
    if unknown:
        steps = ", ".join(s.step for s in names.steps.values())
        raise WorkflowError(
            workflow.source,
            [f"streaming names {unknown!r}, not steps of the workflow (steps: {steps})"],
        )
    chosen = {refs[r].node_id for r in wanted}
    ids = [n.id for n in workflow.steps() if n.id in chosen]
    step_of = {i: f"'{s.step}' (node {i})" for i, s in names.steps.items()}
    problem = _disconnected(workflow, ids, step_of) or _re_entered(workflow, chosen, step_of)
    if problem:
        raise WorkflowError(workflow.source, [f"streaming segment: {problem}"])
    return ids


def _disconnected(workflow: Workflow, ids: List[str], step_of: Mapping[str, str]) -> str:
    """Why the segment is not one connected part ('' when it is)."""
    chosen = set(ids)
    links: Dict[str, Set[str]] = {i: set() for i in ids}
    for i in ids:
        for src, _ in workflow.nodes[i].inputs:
            if src in chosen:
                links[i].add(src)
                links[src].add(i)
    seen, todo = {ids[0]}, [ids[0]]
    while todo:
        for other in links[todo.pop()] - seen:
            seen.add(other)
            todo.append(other)
    apart = [step_of[i] for i in ids if i not in seen]
    if not apart:
        return ""
    return (
        f"steps {', '.join(apart)} are not connected to step {step_of[ids[0]]} through steps "
        "of the segment; stream connected steps (or give each part a workflow of its own)"
    )


def _re_entered(workflow: Workflow, chosen: Set[str], step_of: Mapping[str, str]) -> str:
    """A path that leaves the segment and comes back into it ('' when there is none)."""
    children: Dict[str, List[str]] = {}
    for node in workflow.steps():
        for src, _ in node.inputs:
            children.setdefault(src, []).append(node.id)
    came_from: Dict[str, str] = {}  # outside step -> the segment step it is reached from
    todo = [(c, s) for s in chosen for c in children.get(s, []) if c not in chosen]
    while todo:
        node_id, start = todo.pop()
        if node_id in came_from:
            continue
        came_from[node_id] = start
        for child in children.get(node_id, []):
            if child in chosen:
                return (
                    f"step {step_of[node_id]} is outside the segment but reads from step "
                    f"{step_of[start]} and feeds step {step_of[child]} inside it; "
                    f"add it to the segment"
                )
            todo.append((child, start))
    return ""


def segment_op_name(workflow: Workflow, translator: GraphbookTranslator) -> str:
    """The streaming op's name (the translator's ``get_stream_op_name``)."""
    return translator.names(workflow).stream_op_name


def stored_pins(workflow: Workflow, segment: Sequence[str]) -> Set[Tuple[str, str]]:
    """``(node id, pin)`` of the segment's pins that keep their notes: those no step reads, or
    that a step outside the segment reads."""
    inside = set(segment)
    return {
        (node_id, pin)
        for node_id in segment
        for pin in workflow.nodes[node_id].outputs
        if not workflow.children(node_id, pin)
        or any(c.id not in inside for c in workflow.children(node_id, pin))
    }


def nest_step_config(
    config: Dict[str, Any],
    workflow: Workflow,
    translator: GraphbookTranslator,
    streaming: Streaming = True,
) -> Dict[str, Any]:
    """Run config written per step op (``ops: {job__Step: {config: ...}}``) for the streaming op:
    the entries of the segment's steps move under it, merged deeply into what the streaming op's
    own entry gives for them, the others stay."""
    ops = dict(config.get("ops") or {})
    if not ops:
        return config
    names = translator.names(workflow)
    inside = {names.steps[i].op_name for i in segment_ids(workflow, names, streaming)}
    segment = segment_op_name(workflow, translator)
    nested = dict((ops.pop(segment, None) or {}).get("config") or {})
    for op in [op for op in ops if op in inside]:
        body = ops.pop(op)
        nested[op] = deep_merge_dicts(nested.get(op) or {}, (body or {}).get("config") or {})
    return {**config, "ops": {**ops, segment: {"config": nested}}}
