"""``dg scaffold defs dagster_graphbook.GraphbookWorkflowComponent NAME``: a new component folder.

With ``--workflow`` (and ``--custom-nodes``) the ``defs.yaml`` points at an existing workflow
file; without, the folder also gets a starter: ``nodes.py`` (a source, a step and a resource,
written as Graphbook user code) and ``workflow.json`` (the three connected, as Graphbook's editor
saves them: the resource wired to the step's parameter, the shape hand-written JSON needs too),
so ``dg list defs`` shows its job and assets at once and the files are there to edit.

It also writes the project's instance settings (``defs/instance.py``: ``$DAGSTER_HOME``, else
``<project>/.dagster_home``, unless a ``dagster.yaml`` is there already): ``dg dev`` reads them
when it starts, so the first ``dg dev`` after a scaffold has the one-second run queue, not
Dagster's 5 s until some ``dagster-graphbook materialize`` wrote the file and it was restarted.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

import dagster as dg
from pydantic import BaseModel, Field

from ...model.workflow import workflow_name
from ..instance import default_dagster_home

STARTER_NODES = '''"""Starter nodes of this workflow: edit them or add your own (Graphbook code)."""
from graphbook import param, resource, source, step


@step("Numbers")
@source()
@param("amount", "number", default=10, description="Number of notes to generate")
def numbers(ctx):
    """Generates ``amount`` notes ``{"value": i}``."""
    for i in range(int(ctx.amount)):
        yield {"out": {"value": i}}


@resource("Factor")
@param("factor", "number", default=2, description="What the steps wired to it multiply by")
def factor(ctx):
    """A value set once per run and shared by each step parameter wired to it (a model, say)."""
    return ctx.factor


@step("Double")
@param("factor", "resource", description="A Factor resource, wired in workflow.json")
def double(ctx, data):
    """Multiplies ``data["value"]`` by the value of the Factor resource wired to ``factor``."""
    data["value"] = data["value"] * ctx.factor
'''


def _node(
    node_id: str, kind: str, name: str, y: float, parameters: Dict[str, Any], inputs: List[str]
) -> dict:
    """A node as Graphbook's editor saves it (``kind``: ``step`` or ``resource``, which has no
    pins)."""
    data: Dict[str, Any] = {"name": name, "label": name, "category": "Custom"}
    data["parameters"] = parameters
    if kind == "step":
        data.update(inputs=inputs, outputs=["out"])
    data["isCollapsed"] = False
    x = 300.0 if inputs else 50.0
    return {"id": node_id, "type": kind, "position": {"x": x, "y": y}, "data": data}


def _edge(source: str, pin: str, target: str, handle: str) -> dict:
    return {
        "id": f"e{source}{pin}-{target}{handle}",
        "source": source,
        "sourceHandle": pin,
        "target": target,
        "targetHandle": handle,
    }


def _number(value: int, description: str) -> Dict[str, Any]:
    return {
        "type": "number",
        "default": value,
        "required": False,
        "value": value,
        "description": description,
    }


def starter_workflow() -> Dict[str, Any]:
    """The starter workflow, in Graphbook's editor format: Numbers -> Double, and the Factor
    resource wired to Double's ``factor`` parameter (an edge from its ``"resource"`` handle to
    the parameter's name)."""
    amount = _number(10, "Number of notes to generate")
    factor = {  # no value: the resource's edge gives it
        "type": "resource",
        "default": None,
        "required": False,
        "description": "A Factor resource, wired in workflow.json",
    }
    per_factor = _number(2, "What the steps wired to it multiply by")
    return {
        "version": "0",
        "type": "workflow",
        "nodes": [
            _node("0", "step", "Numbers", 100.0, {"amount": amount}, []),
            _node("1", "step", "Double", 100.0, {"factor": factor}, ["in"]),
            _node("2", "resource", "Factor", 250.0, {"factor": per_factor}, []),
        ],
        "edges": [_edge("0", "out", "1", "in"), _edge("2", "resource", "1", "factor")],
    }


class GraphbookScaffoldParams(BaseModel):
    """``dg scaffold defs ... --workflow PATH [--custom-nodes DIR]`` (paths relative to the new
    folder, as in ``defs.yaml``); without ``--workflow`` a starter is written."""

    workflow: Optional[str] = Field(default=None, description="existing workflow file")
    custom_nodes: List[str] = Field(default_factory=list, description="folders of node classes")


class GraphbookWorkflowScaffolder(dg.Scaffolder[GraphbookScaffoldParams]):
    """Writes ``defs.yaml`` (and, with no workflow given, a starter workflow and node file)."""

    @classmethod
    def get_scaffold_params(cls) -> type[GraphbookScaffoldParams]:
        return GraphbookScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[GraphbookScaffoldParams]) -> None:
        params = request.params or GraphbookScaffoldParams()
        attributes: Dict[str, Any] = {}
        if params.workflow:
            attributes["workflow"] = params.workflow
            if params.custom_nodes:
                attributes["custom_nodes"] = list(params.custom_nodes)
        else:
            folder = request.target_path
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "nodes.py").write_text(STARTER_NODES, encoding="utf-8")
            workflow = json.dumps(starter_workflow(), indent=2) + "\n"
            (folder / "workflow.json").write_text(workflow, encoding="utf-8")
            attributes = {
                "workflow": "workflow.json",
                "custom_nodes": ["nodes.py"],
                "name": workflow_name(request.target_path.name),
            }
        dg.scaffold_component(request, attributes)
        if request.project_root is not None:  # the instance `dg dev` opens here (README)
            default_dagster_home(
                os.environ.get("DAGSTER_HOME") or str(request.project_root / ".dagster_home")
            )
