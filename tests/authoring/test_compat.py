"""Graphbook user code that does ``import graphbook`` loads unchanged through the node registry."""

from __future__ import annotations

import sys

import pytest
from conftest import edge, resource_node, step_node, write_nodes, write_workflow

import dagster_graphbook
from dagster_graphbook import NodeRegistry, WorkflowError, load_workflow
from dagster_graphbook.authoring.compat import install_graphbook_alias

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


def test_two_classes_with_one_name_are_ambiguous_not_fatal(tmp_path):
    """Graphbook loads such a folder (issue #10.7): the registry loads; the name is ambiguous."""
    folder = tmp_path / "dups"
    code = """
    from graphbook.steps import Step

    class Twin(Step):
        pass
    """
    write_nodes(folder, "first.py", code)
    write_nodes(folder, "second.py", code)
    registry = NodeRegistry.load([folder])
    assert registry.ambiguous == {"Twin": [str(folder / "first.py"), str(folder / "second.py")]}


def test_same_class_imported_in_two_files_is_not_a_duplicate(tmp_path):
    folder = tmp_path / "shared"
    write_nodes(
        folder,
        "base_nodes.py",
        "from graphbook.steps import Step\n\nclass Shared(Step):\n    pass\n",
    )
    write_nodes(
        folder, "user.py", "from base_nodes import Shared\n\nclass User(Shared):\n    pass\n"
    )
    registry = NodeRegistry.load([folder])
    assert registry.import_errors == []
    assert {"Shared", "User"} <= set(registry.steps)


def test_syntax_error_file_is_recorded_and_others_load(tmp_path):
    folder = tmp_path / "mixed"
    write_nodes(
        folder,
        "good.py",
        "from graphbook.steps import SourceStep\n\nclass Good(SourceStep):\n    def "
        "load(self):\n        return {'out': [{'a': 1}]}\n",
    )
    write_nodes(
        folder,
        "broken.py",
        "from graphbook.steps import Step\n\nclass Broken(Step):\n    def "
        "on_data(self, data)\n        pass\n",
    )
    registry = NodeRegistry.load([folder])
    assert "Good" in registry.steps
    assert "Broken" not in registry.steps
    assert len(registry.import_errors) == 1
    err = registry.import_errors[0]
    assert err.path == str(folder / "broken.py")
    assert err.line == 4
    assert "SyntaxError" in err.message
    assert f"{folder / 'broken.py'}, line 4" in str(err)

    wf = write_workflow(
        tmp_path,
        "uses_broken",
        [step_node("1", "Good", source=True), step_node("2", "Broken")],
        [edge("1", "out", "2")],
    )
    with pytest.raises(WorkflowError) as info:
        load_workflow(wf, registry)
    message = str(info.value)
    assert str(wf) in message
    assert "Broken" in message and "node 2" in message
    assert "broken.py" in message and "line 4" in message and "SyntaxError" in message


def test_runtime_import_error_reports_line(tmp_path):
    folder = tmp_path / "raising"
    write_nodes(folder, "boom.py", "import os\n\nx = 1\nraise RuntimeError('no GPU here')\n")
    registry = NodeRegistry.load([folder])
    (err,) = registry.import_errors
    assert err.line == 4
    assert "RuntimeError: no GPU here" in err.message


def test_run_workflow_with_broken_node_file_fails_before_running(tmp_path, run_wf):
    folder = tmp_path / "mixed"
    write_nodes(
        folder,
        "good.py",
        "from graphbook.steps import SourceStep\n\nclass Good(SourceStep):\n    def "
        "load(self):\n        return {'out': [{'a': 1}]}\n",
    )
    write_nodes(
        folder,
        "broken.py",
        "from graphbook.steps import Step\nclass Broken(Step):\n    def on_data(self "
        "data):\n        pass\n",
    )
    wf = write_workflow(
        tmp_path,
        "uses_broken",
        [step_node("1", "Good", source=True), step_node("2", "Broken")],
        [edge("1", "out", "2")],
    )
    with pytest.raises(WorkflowError, match=r"broken\.py, line 3"):
        run_wf(wf, custom_nodes=[folder])
