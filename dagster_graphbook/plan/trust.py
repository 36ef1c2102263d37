"""The trust rule, at definition time: which parameters hold code.

Function parameters (and ``Split``'s ``split_fn``) are compiled by the step, so their source
must come from the workflow. A resource whose value reaches such a parameter is code too: run
config may not edit it unless every parameter it feeds is marked overridable. The run-time
refusals are ``execution.ownership.guard``'s.
"""

from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

from ..model.workflow import Workflow, WorkflowNode

# Steps that compile a parameter typed ``resource`` (Graphbook's Split takes its function that way).
_COMPILED_RESOURCE_PARAMS = {"Split": ("split_fn",)}


def code_params(node: WorkflowNode) -> Set[str]:
    """Parameters of ``node`` whose value is compiled: ``function`` ones and ``Split.split_fn``."""
    names = {c.__name__ for c in getattr(node.cls, "__mro__", ())}
    params = {k for k, s in node.parameters.items() if s.get("type") == "function"}
    for cls_name, keys in _COMPILED_RESOURCE_PARAMS.items():
        if cls_name in names:
            params.update(k for k in keys if k in node.parameters)
    return params


def _overridable(workflow: Workflow, node: WorkflowNode) -> Set[str]:
    return {*workflow.overridable_functions, *node.overridable}


def code_consumers(workflow: Workflow, resource_id: str) -> List[Tuple[WorkflowNode, str]]:
    """The (node, parameter) pairs whose compiled code a resource's value reaches, through any
    chain of resources."""
    found: List[Tuple[WorkflowNode, str]] = []
    todo, seen = [resource_id], set()
    while todo:
        rid = todo.pop()
        if rid in seen:
            continue
        seen.add(rid)
        for node in workflow.nodes.values():
            for param, src in node.resource_params.items():
                if src != rid:
                    continue
                if param in code_params(node):
                    found.append((node, param))
                if node.kind == "resource":
                    todo.append(node.id)
    return found


def locked_resource_params(
    workflow: Workflow, node: WorkflowNode
) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """For a resource node: the parameters run config may not change (-> the workflow's value)
    and why, because the resource's value reaches code that is not marked overridable."""
    closed = [
        (n, p) for n, p in code_consumers(workflow, node.id) if p not in _overridable(workflow, n)
    ]
    if not closed:
        return {}, {}
    feeds = ", ".join(f"parameter {p!r} of {n.describe()}" for n, p in closed)
    locked = {
        k: node.values.get(k, s.get("default"))
        for k, s in node.parameters.items()
        if k not in node.resource_params
    }
    why = dict.fromkeys(locked, f"this resource's value is compiled as code by {feeds}")
    return locked, why
