"""Graphbook's Python workflow API: ``Graph``, ``g.step``, ``g.resource``, ``bind``, ``@g()``."""

from __future__ import annotations

import textwrap

import pytest

import dagster_graphbook.authoring as gb
from dagster_graphbook.authoring import Graph
from dagster_graphbook.authoring.steps import SourceStep, Step


class _Src(SourceStep):
    Outputs = ["out", "extra"]

    def load(self):
        return {"out": [{"i": 0}]}


class _Mid(Step):
    Parameters = {"res": {"type": "resource"}}

    def __init__(self, res=None):
        super().__init__()
        self.res = res


def test_graph_ids_params_and_bind():
    g = Graph()
    s = g.step(_Src)
    r = g.resource(gb.resources.NumberResource)
    m = g.step(_Mid)
    assert [s.id, r.id, m.id] == ["0", "1", "2"]
    m.param("res", r).bind(s, "extra")
    assert m.deps == [("extra", s)]
    assert m.parameters == {"res": r}
    with pytest.raises(ValueError, match="nope"):
        m.bind(s, "nope")
    with pytest.raises(TypeError):
        g.step(_Src())
    assert [n.id for n in g.get_steps()] == ["0", "2"]
    assert [n.id for n in g.get_resources()] == ["1"]
    ser = g.serialize()["G"]
    assert ser["2"]["inputs"] == [{"node": "0", "pin": "extra"}]
    assert ser["2"]["parameters"]["res"]["value"] == {"node": "1", "slot": "resource"}


def test_graph_decorator_injects_workflow_global(tmp_path):
    code = textwrap.dedent(
        """
        from dagster_graphbook.authoring import Graph
        from dagster_graphbook.authoring.steps import Split
        g = Graph()
        calls = []

        @g()
        def build():
            calls.append(1)
            g.md('''
                # Title
                text
            ''')
            g.step(Split)
        """
    )
    file = tmp_path / "my_flow.py"
    file.write_text(code)
    ns: dict = {"__name__": "my_flow"}
    exec(compile(code, str(file), "exec"), ns)
    g = ns["g"]
    assert ns["calls"] == [1]  # called immediately
    assert ns["build"] is None
    assert ns["_GRAPHBOOK_WORKFLOW_"] is g
    assert g.module_name == str(file)
    assert g.name == "my_flow"
    assert g.doc == "# Title\ntext"
    assert list(g.nodes) == ["0"]


def test_graph_get_subgraph_keeps_ancestors_and_their_resources():
    g = Graph()
    src = g.step(_Src)  # 0
    r_used = g.resource(gb.resources.NumberResource)  # 1
    r_unused = g.resource(gb.resources.NumberResource)  # 2
    a = g.step(_Mid).param("res", r_used).bind(src)  # 3
    b = g.step(_Mid).bind(a)  # 4
    c = g.step(_Mid).param("res", r_unused).bind(src)  # 5
    sub = g.get_subgraph(b.id)
    assert sorted(sub.nodes) == ["0", "1", "3", "4"]
    assert sub.nodes["3"] is a
    assert c.id not in sub.nodes and r_unused.id not in sub.nodes
    assert sorted(g.get_subgraph(c.id).nodes) == ["0", "2", "5"]


def test_graph_run_goes_through_the_registered_runner(monkeypatch):
    """``Graph.run`` calls the runner the package registered (``runner.run_workflow``, with
    ``record=True`` by default and the subgraph of ``step_id``); with none registered it says so
    instead of importing the runner."""
    from dagster_graphbook.authoring import graph as graph_module
    from dagster_graphbook.runner import run as runner

    assert graph_module._run_workflow is runner.run_workflow
    g = Graph()
    src = g.step(_Src)
    g.step(_Mid).bind(src)
    calls = []

    def fake_run(graph, **kwargs):
        calls.append((sorted(graph.nodes), kwargs))
        return runner.WorkflowRun("r1", True, 0.5, notes={"_Src": {"out": [1]}})

    monkeypatch.setattr(graph_module, "_run_workflow", fake_run)
    assert g.run(step_id=src.id).run_id == "r1"
    assert calls == [([src.id], {"record": True})]
    monkeypatch.setattr(graph_module, "_run_workflow", None)
    with pytest.raises(RuntimeError, match="Graph.run has no runner"):
        g.run()
