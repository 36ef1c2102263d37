"""`GraphbookTranslator`: how workflow nodes map onto Dagster names, asset specs and tags.

Like dagster-dbt's ``DagsterDbtTranslator``: one class, each mapping a method, overridable by
subclassing. Methods receive the `Workflow` and the `WorkflowNode` (whose ``raw`` is the node
dict as Graphbook's editor saved it).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Dict, Mapping, Optional

import dagster as dg

from .code_version import node_code_references, node_code_version
from .docstrings import pin_docs, summary, to_markdown
from .node_info import GRAPHBOOK_META, node_info
from .workflow import Workflow, WorkflowNode

_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")


def safe_name(text: str) -> str:
    """Dagster names allow ``[A-Za-z0-9_]`` only."""
    return _UNSAFE.sub("_", text).strip("_") or "node"


class GraphbookTranslator:
    """Maps a Graphbook workflow onto Dagster definitions."""

    def get_step_name(self, workflow: Workflow, node: WorkflowNode) -> str:
        """The step's part of asset keys and op names: its label, else its class name."""
        return safe_name(node.label or node.name)

    def step_names(self, workflow: Workflow) -> Dict[str, str]:
        """Step names for every node, made unique with the node id where two collide.

        Computed once per workflow (every key and op name asks for it: per node it made building a
        big workflow quadratic).
        """
        cache = self.__dict__.setdefault("_step_names_cache", {})
        hit = cache.get(id(workflow))
        if hit is not None and hit[0] is workflow:
            return hit[1]
        names = {n.id: self.get_step_name(workflow, n) for n in workflow.nodes.values()}
        counts = Counter(names.values())
        unique = {
            nid: f"{name}_{safe_name(nid)}" if counts[name] > 1 else name
            for nid, name in names.items()
        }
        cache[id(workflow)] = (workflow, unique)
        return unique

    def get_asset_key(self, workflow: Workflow, node: WorkflowNode, pin: str) -> dg.AssetKey:
        """``[workflow, step, pin]``, or ``[workflow, step]`` for a step whose only pin is ``out``."""
        step = self.step_names(workflow)[node.id]
        if node.outputs == ["out"]:
            return dg.AssetKey([workflow.name, step])
        return dg.AssetKey([workflow.name, step, safe_name(pin)])

    def get_op_name(self, workflow: Workflow, node: WorkflowNode) -> str:
        return f"{workflow.name}__{self.step_names(workflow)[node.id]}"

    def get_job_name(self, workflow: Workflow) -> str:
        return workflow.name

    def get_group_name(self, workflow: Workflow) -> str:
        return workflow.name

    def get_resource_key(self, workflow: Workflow, node: WorkflowNode) -> str:
        return f"{workflow.name}__{self.step_names(workflow)[node.id]}"

    def get_description(self, workflow: Workflow, node: WorkflowNode) -> str:
        """The step's docstring as Markdown (RST markup and Google sections converted)."""
        doc = to_markdown(node.cls.__doc__)
        return doc or f"Graphbook {node.step_kind} `{node.name}` (node {node.id})"

    def get_job_description(self, workflow: Workflow) -> str:
        return workflow.doc or f"Graphbook workflow `{workflow.name}` ({workflow.source})"

    def get_kinds(self, workflow: Workflow, node: WorkflowNode) -> set:
        return {"python", "pytorch"} if node.step_kind == "batch" else {"python"}

    def get_metadata(self, workflow: Workflow, node: WorkflowNode, pin: str) -> Mapping[str, Any]:
        """Definition metadata: the node's constants in one ``graphbook`` entry (materializations
        carry only what changes per run, so the UI's Plots tab shows no constants)."""
        return {GRAPHBOOK_META: dg.MetadataValue.json(node_info(workflow, node, pin))}

    def get_tags(self, workflow: Workflow, node: WorkflowNode) -> Mapping[str, str]:
        return {"graphbook/step_kind": node.step_kind}

    def get_op_tags(self, workflow: Workflow, node: WorkflowNode) -> Mapping[str, Any]:
        """Op tags (executors read them: ``dagster-k8s/config``, ``dagster-ray/config``, ...)."""
        from .gpus import gpu_op_tags

        gpus = gpu_op_tags(workflow.gpus.get(node.id, 0))  # GraphbookWorkflow(gpus=...)
        return {"graphbook/node_id": node.id, "graphbook/class": node.name, **gpus}

    def get_pool(self, workflow: Workflow, node: WorkflowNode) -> Optional[str]:
        """Concurrency pool: batch steps share ``gpu`` so one GPU is not oversubscribed across runs.

        A pool without a limit set on the instance does not restrict anything; set one with
        ``dagster instance concurrency set gpu 1``.
        """
        return "gpu" if node.step_kind == "batch" else None

    def get_asset_spec(self, workflow: Workflow, node: WorkflowNode, pin: str) -> dg.AssetSpec:
        """The main hook: override and call ``super().get_asset_spec(...).replace_attributes(...)``."""
        return dg.AssetSpec(
            key=self.get_asset_key(workflow, node, pin),
            description=self.get_pin_description(workflow, node, pin),
            group_name=self.get_group_name(workflow),
            kinds=self.get_kinds(workflow, node),
            metadata={
                **self.get_metadata(workflow, node, pin),
                "dagster/code_references": self.get_code_references(workflow, node),
            },
            tags=self.get_tags(workflow, node),
            code_version=self.get_code_version(workflow, node),
        )

    def get_code_version(self, workflow: Workflow, node: WorkflowNode) -> Optional[str]:
        """Changes when the step's class, its file or the node's parameter values change, so the
        UI shows "Unsynced" on assets materialized by older code (``None``: no versioning)."""
        return node_code_version(node)

    def get_code_references(self, workflow: Workflow, node: WorkflowNode) -> Any:
        """``dagster/code_references``: the step class's file and line, the workflow file's node."""
        return node_code_references(workflow, node)

    def get_pin_description(self, workflow: Workflow, node: WorkflowNode, pin: str) -> str:
        """The description of the asset of ``pin``: the step's summary and what goes to that pin
        (its entry in the docstring's ``Outputs:`` section). A step whose only pin is ``out``
        gets the step's description.

        Examples:
            ``return f"{node.name}: notes on pin {pin}"`` in a subclass names only the pin.
        """
        if node.outputs == ["out"]:
            return self.get_description(workflow, node)
        doc = node.cls.__doc__
        head = summary(doc) or f"Graphbook {node.step_kind} `{node.name}` (node {node.id})."
        said = pin_docs(doc).get(pin)
        return f"{head}\n\nNotes sent to pin `{pin}`" + (f": {said}" if said else ".")
