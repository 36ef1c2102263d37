"""Parsing Graphbook workflow files and every load-time validation error."""

from __future__ import annotations

import json

import pytest

from dagster_graphbook import NodeRegistry, WorkflowError, load_workflow
from dagster_graphbook.model.workflow import workflow_name
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow


@pytest.fixture
def extra_registry(tmp_path, repo):
    folder = copy_nodes(tmp_path / "extra_nodes", "extra.py", "workflow_extra")
    return NodeRegistry.load([repo / "custom_nodes" / "sample", folder])


# ---------------------------------------------------------------------------------------------
# The shipped workflows


def test_parse_sample_json(repo, sample_registry):
    wf = load_workflow(repo / "workflows" / "sample.json", sample_registry)
    assert wf.name == "sample"
    assert sorted(wf.nodes) == ["1", "2", "3", "4", "7", "8"]
    assert [n.id for n in wf.steps()][0] == "8"  # topological: the source first
    assert {n.id for n in wf.resources()} == {"4"}
    assert wf.nodes["8"].name == "GenerateNumbers" and wf.nodes["8"].step_kind == "source"
    assert wf.nodes["8"].values == {"amount": 200}  # null value = unset
    assert wf.nodes["7"].values == {"scale": 2, "shift": 1}
    assert wf.nodes["7"].inputs == [("8", "out")]
    assert wf.nodes["1"].inputs == [("7", "out")]
    assert wf.nodes["2"].inputs == [("7", "out")]
    assert wf.nodes["3"].inputs == [("1", "out")]
    assert wf.nodes["3"].resource_params == {"split_fn": "4"}
    assert wf.nodes["3"].outputs == ["A", "B"]
    assert wf.nodes["4"].kind == "resource" and wf.nodes["4"].name == "Function"
    assert wf.nodes["4"].values["val"].startswith("def split_fn(data):")
    assert [n.id for n in wf.children("7", "out")] == ["1", "2"]
    order = [n.id for n in wf._order()]
    assert order.index("4") < order.index("3")


def test_parse_simple_workflows(repo):
    for stem, source_pin in (("simple_functional", "out"), ("simple_class", "message")):
        registry = NodeRegistry.load([repo / "custom_nodes" / stem])
        wf = load_workflow(repo / "workflows" / f"{stem}.json", registry)
        assert wf.name == stem
        steps = {n.name: n for n in wf.steps()}
        assert set(steps) == {"MyFirstSource", "MyFirstStep"}
        src = steps["MyFirstSource"]
        assert steps["MyFirstStep"].inputs == [(src.id, source_pin)]
        (res,) = wf.resources()
        assert res.name == "Number" and res.values == {"val": 0.5}
        assert steps["MyFirstStep"].resource_params == {"prob": res.id}


def test_parse_word_split(repo):
    wf = load_workflow(
        repo / "workflows" / "word_split.json",
        NodeRegistry.load([repo / "custom_nodes" / "word_split"]),
    )
    assert wf.name == "word_split"
    split = wf.nodes["1"]
    assert split.step_kind == "batch"
    assert split.outputs == ["OutputFiles", "Metadata"]
    assert split.values == {
        "batch_size": 4,
        "item_key": "path",
        "part_len": 4,
        "output_dir": "outputs/word_split",
    }


def test_unknown_ui_fields_are_ignored(tmp_path, sample_registry):
    node = step_node(
        "1",
        "GenerateNumbers",
        {"amount": 3},
        source=True,
        width=10,
        height=20,
        selected=True,
        dragging=False,
        positionAbsolute={"x": 1, "y": 2},
        zIndex=5,
    )
    node["data"].update({"key": 12, "isCollapsed": True, "somethingNew": {"x": 1}})
    other = step_node("2", "Transform", {"scale": 3})
    e = edge("1", "out", "2")
    e.update({"animated": True, "style": {"stroke": "red"}, "selected": True})
    path = write_workflow(tmp_path, "ui_fields", [node, other], [e])
    doc = json.loads(path.read_text())
    doc["viewport"] = {"x": 0, "y": 0, "zoom": 1}
    path.write_text(json.dumps(doc))
    wf = load_workflow(path, sample_registry)
    assert wf.nodes["1"].values == {"amount": 3}
    assert wf.nodes["2"].values == {"scale": 3}
    assert wf.nodes["2"].inputs == [("1", "out")]


def test_dict_param_triples_become_dict(tmp_path, extra_registry):
    triples = [
        ["string", "a", "x"],
        ["number", "n", "3"],
        ["number", "f", "2.5"],
        ["boolean", "b", "true"],
        ["boolean", "c", False],
    ]
    path = write_workflow(
        tmp_path,
        "dicts",
        [
            step_node("1", "GenerateNumbers", source=True),
            step_node("2", "Options", {"opts": triples, "tags": ["p", "q"]}),
            resource_node("3", "Dict", {"val": [["number", "k", "1"]]}),
        ],
        [edge("1", "out", "2")],
    )
    wf = load_workflow(path, extra_registry)
    assert wf.nodes["2"].values["opts"] == {"a": "x", "n": 3, "f": 2.5, "b": True, "c": False}
    assert wf.nodes["2"].values["tags"] == ["p", "q"]
    assert wf.nodes["3"].values["val"] == {"k": 1}


def test_workflow_name_snake_case():
    assert workflow_name("SampleWorkflow") == "sample_workflow"
    assert workflow_name("word_split") == "word_split"
    assert workflow_name("My Flow-2") == "my_flow_2"


# ---------------------------------------------------------------------------------------------
# Validation errors: each names the file and the node


def _load_error(path, registry) -> WorkflowError:
    with pytest.raises(WorkflowError) as info:
        load_workflow(path, registry)
    err = info.value
    assert str(path) in str(err)
    assert err.source == str(path)
    assert err.problems
    return err


def test_malformed_json(tmp_path, sample_registry):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "nodes": [\n    {"id": "1",, }\n  ]\n}\n')
    err = _load_error(path, sample_registry)
    assert "malformed JSON" in str(err)
    assert "line 3, column" in str(err)


def test_not_a_workflow_object(tmp_path, sample_registry):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    err = _load_error(path, sample_registry)
    assert "'nodes'" in str(err)


def test_unknown_node_name_lists_known_ones(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path, "unknown", [step_node("5", "NoSuchStep", source=True, label="Mystery")], []
    )
    err = _load_error(path, sample_registry)
    msg = str(err)
    assert "node 5 (Mystery)" in msg
    assert "'NoSuchStep'" in msg
    for known in ("GenerateNumbers", "Transform", "CalcMean", "CalcRunningMean", "Split", "Copy"):
        assert known in msg


def test_unknown_resource_name(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "unknown_res",
        [step_node("1", "GenerateNumbers", source=True), resource_node("2", "Transform")],
        [],
    )
    err = _load_error(path, sample_registry)
    assert "node 2 (Transform)" in str(err)
    assert "is a step" in str(err)


def test_duplicate_ids(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "dups",
        [step_node("1", "GenerateNumbers", source=True), step_node("1", "Transform", label="T")],
        [],
    )
    err = _load_error(path, sample_registry)
    assert "duplicate node id '1'" in str(err)
    assert "node 1 (T)" in str(err) and "node 1 (GenerateNumbers)" in str(err)


def test_edge_to_missing_node(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "dangling",
        [step_node("1", "GenerateNumbers", source=True)],
        [edge("1", "out", "99", edge_id="e-dangling")],
    )
    err = _load_error(path, sample_registry)
    assert "edge e-dangling" in str(err)
    assert "target node '99' does not exist" in str(err)


def test_edge_from_missing_node(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "dangling_src",
        [step_node("1", "GenerateNumbers", source=True), step_node("2", "Transform")],
        [edge("42", "out", "2"), edge("1", "out", "2")],
    )
    err = _load_error(path, sample_registry)
    assert "source node '42' does not exist" in str(err)


def test_edge_from_missing_pin(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "badpin",
        [step_node("1", "GenerateNumbers", source=True), step_node("2", "Transform")],
        [edge("1", "nope", "2")],
    )
    err = _load_error(path, sample_registry)
    msg = str(err)
    assert "node 1 (GenerateNumbers) has no output pin 'nope'" in msg
    assert "its pins: out" in msg


def test_resource_edge_into_data_input(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "res_in",
        [
            step_node("1", "GenerateNumbers", source=True),
            step_node("2", "Transform"),
            resource_node("3", "Number", {"val": 1}),
        ],
        [edge("1", "out", "2"), edge("3", "resource", "2", "in")],
    )
    err = _load_error(path, sample_registry)
    msg = str(err)
    assert "node 3 (Number)" in msg and "node 2 (Transform)" in msg
    assert "data input 'in'" in msg
    assert "scale" in msg  # suggests the parameters


def test_resource_edge_to_non_parameter(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "res_bogus",
        [
            step_node("1", "GenerateNumbers", source=True),
            step_node("2", "Transform"),
            resource_node("3", "Number", {"val": 1}),
        ],
        [edge("1", "out", "2"), edge("3", "resource", "2", "bogus")],
    )
    err = _load_error(path, sample_registry)
    assert "node 2 (Transform) has no parameter 'bogus'" in str(err)
    assert "node 3 (Number)" in str(err)


def test_data_edge_into_resource(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "data_to_res",
        [step_node("1", "GenerateNumbers", source=True), resource_node("3", "Number", {"val": 1})],
        [edge("1", "out", "3", "val")],
    )
    err = _load_error(path, sample_registry)
    assert "node 1 (GenerateNumbers)" in str(err) and "node 3 (Number)" in str(err)


def test_cycle(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "cycle",
        [
            step_node("1", "GenerateNumbers", source=True),
            step_node("2", "Transform"),
            step_node("3", "CalcMean"),
        ],
        [edge("1", "out", "2"), edge("2", "out", "3"), edge("3", "out", "2")],
    )
    err = _load_error(path, sample_registry)
    (cycle,) = [p for p in err.problems if p.startswith("cycle")]
    assert "node 2 (Transform)" in cycle and "node 3 (CalcMean)" in cycle
    assert "node 1" not in cycle


def test_step_without_input_that_is_not_a_source_is_left_out(tmp_path, sample_registry):
    """Graphbook runs the connected part and never calls an idle step (issue #10.5)."""
    nodes = [
        step_node("1", "GenerateNumbers", source=True),
        step_node("2", "CalcMean"),
        step_node("3", "Transform"),
    ]
    path = write_workflow(tmp_path, "orphan", nodes, [edge("2", "out", "3")])
    wf = load_workflow(path, sample_registry)
    assert sorted(wf.nodes) == ["1"]
    assert len(wf.notices) == 2
    assert "node 2 (CalcMean): CalcMean has no input edge and is not a source step" in wf.notices[0]
    assert "node 3 (Transform)" in wf.notices[1]


def test_source_with_input(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "fed_source",
        [
            step_node("1", "GenerateNumbers", source=True),
            step_node("2", "GenerateNumbers", label="Second", source=True),
        ],
        [edge("1", "out", "2")],
    )
    err = _load_error(path, sample_registry)
    assert "node 2 (Second)" in str(err) and "takes no input" in str(err)


def test_wrong_parameter_type(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "badtype",
        [
            step_node("1", "GenerateNumbers", source=True),
            step_node("2", "Transform", {"scale": "abc", "shift": True}),
        ],
        [edge("1", "out", "2")],
    )
    err = _load_error(path, sample_registry)
    msg = str(err)
    assert "node 2 (Transform): parameter 'scale' (number)" in msg
    assert "'abc'" in msg
    assert "parameter 'shift'" in msg  # a bool is not a number


def test_unknown_parameter(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path, "badparam", [step_node("1", "GenerateNumbers", {"amonut": 3}, source=True)], []
    )
    err = _load_error(path, sample_registry)
    assert (
        "node 1 (GenerateNumbers)" in str(err) and "'amonut'" in str(err) and "amount" in str(err)
    )


def test_bad_function_source(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "badfn",
        [
            step_node("1", "GenerateNumbers", source=True),
            step_node("2", "Split"),
            resource_node("3", "Function", {"val": "def f(d)\n    return 1"}),
        ],
        [edge("1", "out", "2"), edge("3", "resource", "2", "split_fn")],
    )
    err = _load_error(path, sample_registry)
    assert "node 3 (Function)" in str(err) and "does not compile" in str(err)


def test_missing_required_parameter(tmp_path, extra_registry):
    path = write_workflow(
        tmp_path,
        "required",
        [step_node("1", "Ask", source=True), step_node("2", "Needs", label="NeedsLabel")],
        [edge("1", "out", "2")],
    )
    err = _load_error(path, extra_registry)
    assert "node 2 (NeedsLabel)" in str(err)
    assert "required parameter 'must'" in str(err)
    # with a value it loads
    path2 = write_workflow(
        tmp_path,
        "required_ok",
        [step_node("1", "Ask", source=True), step_node("2", "Needs", {"must": "x"})],
        [edge("1", "out", "2")],
    )
    assert load_workflow(path2, extra_registry).nodes["2"].values == {"must": "x"}


def test_unknown_node_type(tmp_path, sample_registry):
    extra = {"id": "g1", "type": "comment", "data": {"label": "My note"}}
    nodes = [step_node("1", "GenerateNumbers", source=True), extra]
    path = write_workflow(tmp_path, "comment", nodes, [])
    msg = str(_load_error(path, sample_registry))
    assert "node g1 (My note): unknown node type 'comment'" in msg


@pytest.mark.parametrize("ntype", ["widget", "stpe"])
def test_unknown_node_type_beside_a_group_is_the_same_error(tmp_path, sample_registry, ntype):
    """Flattening (any ``group`` node) dropped a node of an unknown type without a word, and the
    rest loaded and ran without it; it is the error it is without a group, a malformed node too.
    """
    odd = step_node("3", "Transform", label="Odd")
    odd["type"] = ntype
    nodes = [step_node("1", "GenerateNumbers", source=True), step_node("2", "Transform"), odd]
    edges = [edge("1", "out", "2"), edge("2", "out", "3")]
    plain = _load_error(write_workflow(tmp_path, "plain", nodes, edges), sample_registry)
    group = {"id": "g", "type": "group", "data": {"label": "G"}}
    grouped = _load_error(
        write_workflow(tmp_path, "grouped", [*nodes, group, 7], edges), sample_registry
    )
    said = f"node 3 (Odd): unknown node type {ntype!r} (expected 'step', 'resource', 'group'"
    assert [p for p in plain.problems if p.startswith("node 3")][0].startswith(said)
    assert [p for p in grouped.problems if p.startswith("node 3")] == [
        p for p in plain.problems if p.startswith("node 3")
    ]
    assert "nodes[4]: not a node object with an 'id'" in grouped.problems, grouped.problems
    # inside a subflow the node is named with the subflow's id
    write_workflow(tmp_path, "Sub", [odd], [])
    sub = {"id": "s", "type": "subflow", "data": {"filename": "Sub.json"}}
    inner = _load_error(
        write_workflow(tmp_path, "outer", [*nodes[:2], sub], edges[:1]), sample_registry
    )
    assert any(p.startswith(f"node s/3 (Odd): unknown node type {ntype!r}") for p in inner.problems)


def test_all_problems_reported_at_once(tmp_path, sample_registry):
    path = write_workflow(
        tmp_path,
        "many",
        [
            step_node("1", "GenerateNumbers", source=True),
            step_node("2", "Nope"),
            step_node("3", "CalcMean"),
            step_node("4", "Transform", {"scale": "abc"}),
        ],
        [edge("1", "bad", "3"), edge("1", "out", "4")],
    )
    err = _load_error(path, sample_registry)
    assert len(err.problems) >= 3
    assert any("'Nope'" in p for p in err.problems)
    assert any("'bad'" in p and "node 1" in p for p in err.problems)
    assert any("node 4 (Transform): parameter 'scale'" in p for p in err.problems)


def test_python_graph_validation_errors(repo, sample_registry):
    from dagster_graphbook.authoring import Graph

    g = Graph()
    src = g.step(sample_registry.steps["GenerateNumbers"])
    src.param("amuont", 3)
    g.step(sample_registry.steps["CalcMean"])  # no input: left out, as Graphbook does
    with pytest.raises(WorkflowError) as info:
        load_workflow(g, name="graph_errors")
    msg = str(info.value)
    assert "'graph_errors' (Python Graph)" in msg
    assert "node 0 (GenerateNumbers)" in msg and "'amuont'" in msg
    assert "node 1" not in msg


def test_python_workflow_file(repo):
    wf = load_workflow(
        repo / "workflows" / "sample_graph.py", search_path=[repo / "custom_nodes" / "sample"]
    )
    assert wf.name == "sample_graph"
    assert [n.name for n in wf.steps()][0] == "GenerateNumbers"
    assert sorted(n.name for n in wf.nodes.values()) == sorted(
        ["GenerateNumbers", "Transform", "CalcMean", "CalcRunningMean", "FunctionResource", "Split"]
    )
    assert wf.nodes["5"].resource_params == {"split_fn": "4"}
    assert wf.nodes["5"].inputs == [("2", "out")]
    assert wf.nodes["0"].values == {"amount": 200}
    assert wf.doc.startswith("# Sample workflow")


def test_python_workflow_file_import_error(tmp_path):
    path = tmp_path / "bad_graph.py"
    path.write_text("from graphbook import Graph\nimport not_a_module_anywhere\n")
    with pytest.raises(WorkflowError) as info:
        load_workflow(path)
    assert str(path) in str(info.value) and "not_a_module_anywhere" in str(info.value)
