"""Groups, subflows and export nodes resolved the way Graphbook's editor does before a run."""

from __future__ import annotations

from dagster_graphbook import load_workflow
from tests.support.workflows import edge, step_node, write_workflow


def test_group_and_subflow_flattened_like_the_editor(tmp_path, sample_registry):
    """Group handles (``x`` outside, ``x_inner`` inside) and a subflow's exports are followed."""
    group = {"id": "g", "type": "group", "data": {"label": "G"}}
    sub_nodes = [
        {"id": "1", "type": "export", "data": {"exportType": "input"}},
        step_node("2", "CalcMean"),
        {"id": "3", "type": "export", "data": {"exportType": "output"}},
    ]
    write_workflow(tmp_path, "Sub", sub_nodes, [edge("1", "0", "2"), edge("2", "out", "3", "0")])
    nodes = [
        step_node("1", "GenerateNumbers", source=True),
        group,
        step_node("2", "Transform", parentId="g"),
        {"id": "s", "type": "subflow", "data": {"filename": "Sub.json"}},
        step_node("4", "CalcRunningMean"),
    ]
    edges = [
        edge("1", "out", "g", "x"),
        edge("g", "x_inner", "2"),
        edge("2", "out", "g", "y_inner"),
        edge("g", "y", "s", "0"),
        edge("s", "0", "4"),
    ]
    wf = load_workflow(write_workflow(tmp_path, "main", nodes, edges), sample_registry)
    assert sorted(wf.nodes) == ["1", "2", "4", "s/2"]
    assert wf.nodes["2"].inputs == [("1", "out")]
    assert wf.nodes["s/2"].inputs == [("2", "out")]
    assert wf.nodes["4"].inputs == [("s/2", "out")]
