"""What a step does, as Dagster kinds (the badges on an asset in the UI).

- ``python``: every step (Graphbook steps are Python classes).
- ``parquet``: the step has a sink pin (no step reads it), whose notes the IO manager also writes
  as a Parquet table when they are flat dicts (``io.py``, ``tables.py``).
- ``pytorch``: the step runs a torch model: its class's code, or the code of a resource it is bound
  to (directly or through other resources), builds or loads one (``torch.nn``, ``nn.Module``,
  ``torch.load``, ``torch.jit``, ``torch.hub``, ``torch.export``, ``torch.compile``,
  ``torchvision.models``). Tensors made in a ``load_fn`` alone do not count, and a batch step is not
  ``pytorch`` for being a batch step. The code is read, never run, so loading a workflow stays fast
  and imports no torch.
"""

from __future__ import annotations

import functools
import re
from typing import Set

from ..model.workflow import Workflow, WorkflowNode
from .code_version import class_source

_TORCH_MODEL = re.compile(
    r"\btorch\.(?:nn|load|jit|hub|export|compile)\b|\bnn\.Module\b|\btorchvision\.models\b"
    r"|\bfrom\s+torch\s+import\s+[^\n]*\bnn\b"
)


@functools.cache
def uses_torch_model(cls: type) -> bool:
    """Whether the class's source builds or loads a torch model (see the module docstring)."""
    return bool(_TORCH_MODEL.search(class_source(cls)))


def _runs_torch_model(workflow: Workflow, node: WorkflowNode, seen: Set[str]) -> bool:
    if node.id in seen:
        return False
    seen.add(node.id)
    if uses_torch_model(node.cls):
        return True
    return any(
        _runs_torch_model(workflow, workflow.nodes[rid], seen)
        for rid in node.resource_params.values()
        if rid in workflow.nodes
    )


def step_kinds(workflow: Workflow, node: WorkflowNode) -> Set[str]:
    """``python``, plus ``parquet`` and ``pytorch`` where they apply (see the module docstring)."""
    kinds = {"python"}
    if any(not workflow.children(node.id, pin) for pin in node.outputs):
        kinds.add("parquet")
    if _runs_torch_model(workflow, node, set()):
        kinds.add("pytorch")
    return kinds
