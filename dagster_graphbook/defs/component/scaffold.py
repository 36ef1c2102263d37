"""``dg scaffold defs dagster_graphbook.GraphbookWorkflowComponent NAME``: a new component folder.

With ``--workflow`` (and ``--custom-nodes``) the ``defs.yaml`` points at an existing workflow
file; without, the folder also gets a starter: ``nodes.py`` (a source and a step, written as
Graphbook user code) and ``workflow.json`` (the two connected, as Graphbook's editor saves them),
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
from graphbook import param, source, step


@step("Numbers")
@source()
@param("amount", "number", default=10, description="Number of notes to generate")
def numbers(ctx):
    """Generates ``amount`` notes ``{"value": i}``."""
    for i in range(int(ctx.amount)):
        yield {"out": {"value": i}}


@step("Double")
@param("factor", "number", default=2, description="Multiplies each value")
def double(ctx, data):
    """Multiplies ``data["value"]`` by ``factor``."""
    data["value"] = data["value"] * ctx.factor
'''


def _node(node_id: str, name: str, x: float, params: Dict[str, Any], inputs: List[str]) -> dict:
    return {
        "id": node_id,
        "type": "step",
        "position": {"x": x, "y": 100.0},
        "data": {
            "name": name,
            "label": name,
            "category": "Custom",
            "parameters": params,
            "inputs": inputs,
            "outputs": ["out"],
            "isCollapsed": False,
        },
    }


def starter_workflow() -> Dict[str, Any]:
    """The starter workflow: Numbers -> Double, in Graphbook's editor format."""
    amount = {
        "type": "number",
        "default": 10,
        "required": False,
        "value": 10,
        "description": "Number of notes to generate",
    }
    factor = {
        "type": "number",
        "default": 2,
        "required": False,
        "value": 2,
        "description": "Multiplies each value",
    }
    return {
        "version": "0",
        "type": "workflow",
        "nodes": [
            _node("0", "Numbers", 50.0, {"amount": amount}, []),
            _node("1", "Double", 300.0, {"factor": factor}, ["in"]),
        ],
        "edges": [
            {
                "id": "e0-1",
                "source": "0",
                "sourceHandle": "out",
                "target": "1",
                "targetHandle": "in",
            }
        ],
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
