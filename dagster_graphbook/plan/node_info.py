"""The constants of a step's asset (workflow, node, class, pin, sink, parameters) as ONE
definition metadata entry, ``graphbook``: they never change between runs, so they stay off the
materializations (whose numbers the UI plots) and out of the way on the asset's page. Read back
by ``plan.job_steps.read_node_info``, which needs no workflow loader."""

from __future__ import annotations

import json
from typing import Any, Dict

from ..model.workflow import Workflow, WorkflowNode


def _json_safe(value: Any) -> Any:
    """``value`` as JSON (objects a Python workflow passes are shown by their repr)."""
    return json.loads(json.dumps(value, default=repr))


def node_info(workflow: Workflow, node: WorkflowNode, pin: str) -> Dict[str, Any]:
    """What a reader wants to know of where an asset comes from, as a JSON object."""
    return {
        "workflow": workflow.source,
        "node_id": node.id,
        "class": node.name,
        "step_kind": node.step_kind,
        "pin": pin,
        "sink": not workflow.children(node.id, pin),
        "params": _json_safe(dict(node.values)),
        "resources": dict(node.resource_params),
    }
