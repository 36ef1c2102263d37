"""Graphbook user code that does ``import graphbook`` loads unchanged through the node registry."""

from __future__ import annotations

import sys

import dagster_graphbook
from dagster_graphbook import NodeRegistry, load_workflow
from dagster_graphbook.authoring.compat import install_graphbook_alias
from tests.support.workflows import edge, resource_node, step_node, write_nodes, write_workflow

COMPAT_NODES = '''
"""Written the way Graphbook's docs write nodes (several of these imports fail on 0.13.3)."""
import graphbook
from graphbook import utils, step, param, source, output
from graphbook.steps import Step, BatchStep, SourceStep
from graphbook.resources import Resource
from graphbook.utils import image, transform_function_string
from graphbook.core.resources import NumberResource
from graphbook.core import steps as core_steps


class Prefix(Resource):
    """A resource subclass: its value is its val with a prefix."""
    Parameters = {"val": {"type": "string", "default": "p"}}

    def value(self):
        return "pre-" + self.val


class Tagger(Step):
    """Tags each note with the prefix resource and routes on a function string."""
    RequiresInput = True
    Parameters = {
        "prefix": {"type": "resource"},
        "rule": {"type": "function", "default": "def rule(d):\\n    return d['i'] % 2 == 0\\n"},
    }
    Outputs = ["even", "odd"]
    Category = "Compat"

    def __init__(self, prefix, rule):
        super().__init__()
        self.prefix = prefix
        self.rule = transform_function_string(rule)

    def on_data(self, data):
        data["tag"] = f"{self.prefix}{data['i']}"
        data["img"] = image(f"/tmp/{data['i']}.png")
        data["batchable"] = utils.is_batchable([1])

    def route(self, data):
        return "even" if self.rule(data) else "odd"


@step("Compat/Numbers")
@source()
@param("count", "number", default=3)
def numbers(ctx):
    for i in range(int(ctx.count)):
        yield {"out": {"i": i, "is_graphbook_step": isinstance(ctx, graphbook.steps.Step)}}


assert core_steps.Step is Step
assert NumberResource.__name__ == "NumberResource"
'''


def _compat_workflow(tmp_path):
    nodes_dir = write_nodes(tmp_path / "nodes", "compat_nodes.py", COMPAT_NODES)
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
