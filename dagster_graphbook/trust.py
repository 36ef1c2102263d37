"""The trust rule: nothing that arrives through run config or a partition key becomes code.

Function parameters (and ``Split``'s ``split_fn``) are compiled by the step, so their source
must come from the workflow. A resource whose value reaches such a parameter is code too: run
config may not edit it unless every parameter it feeds is marked overridable. Partition keys
are checked against the job's partitions and may not carry path or format syntax.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from .errors import quoted
from .workflow import Workflow, WorkflowNode

# Steps that compile a parameter typed ``resource`` (Graphbook's Split takes its function that way).
_COMPILED_RESOURCE_PARAMS = {"Split": ("split_fn",)}
# A partition key is substituted into paths and names files:
# no separators, '..', braces, control characters or unpaired surrogates (no file name holds one).
_UNSAFE_KEY = re.compile(r"[/\\{}\x00-\x1f\x7f\ud800-\udfff]|\.\.|^[.\s]|\s$")
# It is also a folder of the notes store (``<base>/<asset>/<partition>/<run id>.pkl``): a file
# or folder name holds at most 255 bytes (NAME_MAX on Linux).
MAX_KEY_BYTES = 255


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


def check_code_config(
    config: Dict[str, Any],
    locked: Dict[str, Any],
    overridable: Iterable[str],
    label: str,
    why: Optional[Dict[str, str]] = None,
) -> None:
    """Refuse run config that changes a locked (code) parameter, naming the step or resource."""
    from .execution.errors import StepFailure

    hint = "('\"overridable\": true' in its entry, or node.param(key, value, overridable=True))"
    for key, value in config.items():
        if key not in locked or value == locked[key] or key in overridable:
            continue
        if why and key in why:
            raise StepFailure(
                label,
                f"run config changes parameter {key!r}, but {why[key]}; only the workflow may "
                "set it unless the workflow marks the consuming function parameter overridable "
                f"{hint}",
            )
        raise StepFailure(
            label,
            f"run config replaces the code of function parameter {key!r}, which the workflow "
            "does not mark overridable; function parameters run code, so only the workflow may "
            f"set them unless it marks the parameter {hint}",
        )


def check_partition_key(key: str, partitions_def: Any, instance: Any, label: str) -> str:
    """``key`` if it is one of the job's partitions and safe in a path; else a clear refusal."""
    from .execution.errors import StepFailure

    if not isinstance(key, str) or not key or _UNSAFE_KEY.search(key):
        raise StepFailure(
            label,
            f"partition key {quoted(key)} refused: it is substituted into paths, so it may not "
            "hold '/', '\\', '..', braces, control characters or unpaired surrogates, nor start "
            "with '.'",
        )
    size = len(key.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise StepFailure(
            label,
            f"partition key {quoted(key)} ({size} bytes) refused: it names a folder of the "
            f"notes store, and a folder name is at most {MAX_KEY_BYTES} bytes of UTF-8 "
            "(NAME_MAX on Linux): use a shorter key",
        )
    if partitions_def is None:
        raise StepFailure(label, f"partition key {quoted(key)} refused: the job is not partitioned")
    try:
        known = partitions_def.has_partition_key(key, dynamic_partitions_store=instance)
    except TypeError:
        known = key in partitions_def.get_partition_keys(dynamic_partitions_store=instance)
    if not known:
        raise StepFailure(
            label, f"partition key {quoted(key)} refused: it is not a partition of the job"
        )
    return key
