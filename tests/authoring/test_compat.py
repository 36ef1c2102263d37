"""Graphbook user code that does ``import graphbook`` loads unchanged through the node registry."""

from __future__ import annotations

import sys

import dagster_graphbook
from dagster_graphbook import NodeRegistry, load_workflow
from dagster_graphbook.authoring.compat import install_graphbook_alias
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow


def _compat_workflow(tmp_path):
    nodes_dir = copy_nodes(tmp_path / "nodes", "compat_nodes.py", "graphbook_compat")
    wf = write_workflow(
        tmp_path,
        "compat_flow",
        [
            step_node("10", "Numbers", {"count": 5}, source=True),
            step_node("11", "Tagger", outputs=["even", "odd"]),
            resource_node("12", "Prefix", {"val": "x"}),
        ],
        [edge("10", "out", "11"), edge("12", "resource", "11", "prefix")],
    )
    return nodes_dir, wf


def test_graphbook_alias_modules():
    install_graphbook_alias()
    import graphbook
    import graphbook.steps
    import graphbook.utils

    assert graphbook.step is dagster_graphbook.authoring.step
    assert graphbook.steps.BatchStep is dagster_graphbook.authoring.steps.BatchStep
    assert sys.modules["graphbook.core.steps"] is sys.modules["graphbook.steps"]
    assert graphbook.utils.image("p") == {"type": "image", "value": "p"}
    from graphbook.resources import Resource

    assert Resource is dagster_graphbook.authoring.resources.Resource


def test_dotted_access_to_graphbook_core_submodules():
    """``import graphbook.core.steps`` then ``graphbook.core.steps.Step`` works with real
    Graphbook."""
    install_graphbook_alias()
    import graphbook
    import graphbook.core.resources
    import graphbook.core.steps

    assert graphbook.core.steps.Step is dagster_graphbook.authoring.steps.Step
    assert (
        graphbook.core.resources.NumberResource
        is dagster_graphbook.authoring.resources.NumberResource
    )


def test_graphbook_style_file_loads_and_runs(tmp_path, run_wf):
    nodes_dir, wf = _compat_workflow(tmp_path)
    registry = NodeRegistry.load([nodes_dir])
    assert registry.import_errors == []
    assert {"Tagger", "Numbers"} <= set(registry.steps)
    assert "Prefix" in registry.resources
    # classes merely imported into the file (Step, BatchStep, NumberResource...) are not new nodes
    assert "BatchStep" not in registry.steps and "Step" not in registry.steps

    run = run_wf(wf, custom_nodes=[nodes_dir])
    assert run.success, run.failure
    assert run.counts() == {"Numbers": {"out": 5}, "Tagger": {"even": 3, "odd": 2}}
    even = run.notes["Tagger"]["even"]
    assert [n["i"] for n in even] == [0, 2, 4]
    assert [n["tag"] for n in even] == ["pre-x0", "pre-x2", "pre-x4"]
    assert even[0]["img"] == {"type": "image", "value": "/tmp/0.png"}
    assert all(n["is_graphbook_step"] and n["batchable"] for n in even)


def test_lookup_by_class_name_ignores_saved_module(tmp_path):
    nodes_dir, wf = _compat_workflow(tmp_path)
    text = wf.read_text().replace('"transient_module"', '"some.module.that.does.not.exist"')
    wf.write_text(text)
    workflow = load_workflow(wf, NodeRegistry.load([nodes_dir]))
    assert workflow.nodes["11"].cls.__name__ == "Tagger"
    assert workflow.nodes["11"].raw["data"]["module"] == "some.module.that.does.not.exist"
    assert workflow.nodes["12"].cls.__name__ == "Prefix"
