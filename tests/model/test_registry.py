"""Custom node files: one class name in two files, one class imported into two files, and files
that fail to import (recorded with their line; a workflow using them fails to load); helper
modules node files import, imported anew when edited."""

from __future__ import annotations

import pytest

from dagster_graphbook import NodeRegistry, WorkflowError, load_workflow
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_nodes, write_workflow


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


def test_helpers_a_node_file_imports_are_reloaded_when_edited(tmp_path, run_wf):
    """A long-lived process runs the workflow, the node file's helper module (and the module
    that helper imports) is edited, the workflow runs again: the new helper code runs, as after
    an edit of the node file itself."""
    folder = copy_nodes(tmp_path / "custom_nodes", "my_nodes.py", "registry_scaled")
    helper = "import scaling_factor\n\ndef scale(x):\n    return x * scaling_factor.FACTOR\n"
    write_nodes(folder, "scaling_helpers.py", helper)
    write_nodes(folder, "scaling_factor.py", "FACTOR = 10\n")
    wf = write_workflow(
        tmp_path,
        "scaled",
        [step_node("1", "Numbers", source=True), step_node("2", "Scale")],
        [edge("1", "out", "2")],
    )

    def ys() -> list:
        run = run_wf(wf, custom_nodes=[folder])
        assert run.success, run.failure
        return [n["y"] for n in run.notes["Scale"]["out"]]

    assert ys() == [10, 20]
    write_nodes(folder, "scaling_helpers.py", helper.replace("return x *", "return 1 + x *"))
    assert ys() == [11, 21]  # the helper edited
    write_nodes(folder, "scaling_factor.py", "FACTOR = 100\n")
    assert ys() == [101, 201]  # the module the helper imports edited
    # nothing edited: nothing imported anew (the classes stay the same objects)
    assert NodeRegistry.load([folder]).steps["Scale"] is NodeRegistry.load([folder]).steps["Scale"]
