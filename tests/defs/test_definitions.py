"""Building definitions: what a load warns about, and work linear in the number of steps.

A 1,000-step chain took 2.9x a 500-step one: per step, ``Workflow.children`` scanned every node's
inputs and the code reference re-read the whole workflow file; and the cyclic GC walked the heap
over and over while Dagster sorted the job's steps. The tests count that work (input list scans,
workflow file bytes read at N and 2N steps) and check the GC is paused there; timings are in
``benchmarks/bench_definitions.py``."""

from __future__ import annotations

import gc
import json
import shutil
import warnings
from pathlib import Path
from typing import Dict, List

import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from dagster_graphbook.authoring.graph import Graph
from dagster_graphbook.model.registry import NodeRegistry
from dagster_graphbook.model.workflow import UnboundResourceWarning, WorkflowError, load_workflow
from tests.support.nodes import copy_nodes, node_source
from tests.support.paths import REPO
from tests.support.workflows import (
    chain_workflow,
    edge,
    resource_node,
    step_node,
    write_workflow,
)


class _CountedInputs(list):
    """A node's ``inputs`` that counts each scan (iteration or ``in``) in ``counter``."""

    def __init__(self, items, counter: Dict[str, int]):
        super().__init__(items)
        self.counter = counter

    def __iter__(self):
        self.counter["scans"] += 1
        return super().__iter__()

    def __contains__(self, item) -> bool:
        self.counter["scans"] += 1
        return super().__contains__(item)


def _chain(folder: Path, steps: int) -> Path:
    return chain_workflow(folder, steps, f"chain{steps}")


def _build_work(tmp_path: Path, steps: int, monkeypatch) -> Dict[str, int]:
    """Input list scans and workflow file bytes read while building an N-step chain."""
    nodes = copy_nodes(tmp_path / "nodes", "chain_nodes.py", "chain")
    path = _chain(tmp_path, steps)
    workflow = load_workflow(path, NodeRegistry.load([nodes]))
    counter = {"scans": 0, "bytes": 0}
    for node in workflow.nodes.values():
        node.inputs = _CountedInputs(node.inputs, counter)
    read_text = Path.read_text

    def counted_read_text(self, *args, **kwargs):
        text = read_text(self, *args, **kwargs)
        if self == path:
            counter["bytes"] += len(text)
        return text

    with monkeypatch.context() as patch:
        patch.setattr(Path, "read_text", counted_read_text)
        defs = build_definitions([GraphbookWorkflow(workflow)], strict=True)
    assert len(defs.resolve_asset_graph().get_all_asset_keys()) == steps
    return counter


def test_building_a_chain_scans_inputs_and_reads_its_file_linearly(tmp_path, monkeypatch):
    small = _build_work(tmp_path / "small", 150, monkeypatch)
    large = _build_work(tmp_path / "large", 300, monkeypatch)
    assert small["scans"] and small["bytes"]  # counted at all
    # linear work doubles (plus a constant); a walk over all steps per step quadruples
    assert large["scans"] / small["scans"] <= 2.2, (small, large)
    assert large["bytes"] / small["bytes"] <= 2.2, (small, large)


def test_every_node_reference_points_at_its_id_line(tmp_path):
    """The workflow file's lines of all node ids, found in one pass, are each node's own."""
    nodes = copy_nodes(tmp_path / "nodes", "chain_nodes.py", "chain")
    path = _chain(tmp_path, 40)
    data = json.loads(path.read_text())
    data["edges"] = [{**e, "id": e["target"]} for e in data["edges"]]  # edge ids that are node ids
    data["nodes"] = data["nodes"][::-1]
    path.write_text(json.dumps(data, indent=2))
    defs = build_definitions([GraphbookWorkflow(path, custom_nodes=[nodes])], strict=True)
    lines: List[str] = path.read_text().splitlines()
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node_id = graph.get(key).metadata["graphbook"].value["node_id"]
        refs = graph.get(key).metadata["dagster/code_references"].code_references
        ref = next(r for r in refs if r.file_path == str(path))
        assert lines[ref.line_number - 1].strip() == f'"id": "{node_id}",', key


def test_dagster_sorts_the_steps_with_the_cyclic_gc_paused(tmp_path, monkeypatch):
    """Resolving the job, Dagster sorts the steps level by level with a new set per step and
    level (steps x depth of a chain): the cyclic GC, counting those short-lived sets, walked the
    whole heap again and again (a quarter of a 1,000-step chain's build). It is paused there, and
    on again after."""
    import toposort

    gc_on_while_sorting = []
    original = toposort.toposort

    def watched(data):
        gc_on_while_sorting.append(gc.isenabled())
        yield from original(data)

    monkeypatch.setattr(toposort, "toposort", watched)
    nodes = copy_nodes(tmp_path / "nodes", "chain_nodes.py", "chain")
    build_definitions([GraphbookWorkflow(_chain(tmp_path, 20), custom_nodes=[nodes])], strict=True)
    assert gc_on_while_sorting and not any(gc_on_while_sorting)
    assert gc.isenabled()


def _model_workflow(tmp_path: Path, *, connected: bool) -> Path:
    """Numbers -> Scale, its ``model`` fed by a Doubler resource when ``connected``; ``factor``
    (declared default) and ``offset`` (``__init__`` default) are never connected."""
    tmp_path.mkdir(exist_ok=True)
    edges = [edge("1", "out", "2")] + ([edge("0", "resource", "2", "model")] if connected else [])
    return write_workflow(
        tmp_path,
        "scaled",
        [
            resource_node("0", "Doubler"),
            step_node("1", "Numbers", source=True),
            step_node("2", "Scale"),
        ],
        edges,
    )


def test_unconnected_resource_parameter_warns_naming_workflow_step_and_parameter(
    tmp_path, monkeypatch
):
    """Left unconnected, ``model`` reaches the step as None (``'NoneType' object is not
    callable`` at its first note); the load says so. Parameters with a default do not warn."""
    monkeypatch.delenv("DAGSTER_GRAPHBOOK_STRICT", raising=False)
    nodes = copy_nodes(tmp_path / "nodes", "model_nodes.py", "model_loading")
    path = _model_workflow(tmp_path, connected=False)
    with pytest.warns(UnboundResourceWarning) as said:
        defs = build_definitions([GraphbookWorkflow(path, custom_nodes=[nodes])])
    messages = [str(w.message) for w in said if w.category is UnboundResourceWarning]
    assert len(messages) == 1, messages  # model only: factor and offset have defaults
    assert str(path) in messages[0]
    assert "node 2 (Scale)" in messages[0] and "resource parameter 'model'" in messages[0]
    assert defs.resolve_job_def("scaled")  # still a job (a warning, not an error)

    with warnings.catch_warnings():
        warnings.simplefilter("error", UnboundResourceWarning)
        connected = _model_workflow(tmp_path / "ok", connected=True)
        build_definitions([GraphbookWorkflow(connected, custom_nodes=[nodes])], strict=True)


def test_unconnected_resource_parameter_fails_the_load_under_strict(tmp_path, monkeypatch):
    nodes = copy_nodes(tmp_path / "nodes", "model_nodes.py", "model_loading")
    path = _model_workflow(tmp_path, connected=False)
    monkeypatch.setenv("DAGSTER_GRAPHBOOK_STRICT", "1")
    with pytest.raises(WorkflowError) as raised:
        build_definitions([GraphbookWorkflow(path, custom_nodes=[nodes])])
    assert str(path) in str(raised.value)
    assert "node 2 (Scale): resource parameter 'model' is connected to no resource" in str(
        raised.value
    )
    monkeypatch.delenv("DAGSTER_GRAPHBOOK_STRICT")
    with pytest.raises(WorkflowError, match="resource parameter 'model'"):  # strict=True alike
        build_definitions([GraphbookWorkflow(path, custom_nodes=[nodes])], strict=True)


def test_unconnected_resource_parameter_of_a_python_graph_warns(tmp_path, monkeypatch):
    """A ``Graph`` whose step never got ``param("model", resource)``."""
    monkeypatch.delenv("DAGSTER_GRAPHBOOK_STRICT", raising=False)
    namespace: Dict[str, object] = {}
    exec(compile(node_source("model_loading"), "model_nodes.py", "exec"), namespace)
    g = Graph()
    g.resource(namespace["Doubler"])
    scale = g.step(namespace["Scale"])
    scale.bind(g.step(namespace["Numbers"]))
    with pytest.warns(UnboundResourceWarning, match=r"'model' \(Python Graph\): node 1 \(Scale\)"):
        build_definitions([GraphbookWorkflow(g, name="model")])


def test_strict_definitions_fail_on_a_node_file_that_does_not_import(tmp_path):
    """``strict`` (``dg check defs`` in CI, a component's ``strict: true``): a node file that
    fails to import fails the load even if the workflow uses none of its nodes; not strict, the
    workflow loads (the file is a warning)."""
    nodes = tmp_path / "nodes"
    shutil.copytree(REPO / "custom_nodes" / "sample", nodes)
    (nodes / "quits.py").write_text("import sys\n\nsys.exit(3)\n")
    workflow = REPO / "workflows" / "sample.json"
    assert build_definitions([workflow], custom_nodes=[nodes], strict=False).resolve_job_def(
        "sample"
    )
    with pytest.raises(WorkflowError, match=r"quits\.py, line 3 failed to import.*sys\.exit\(3\)"):
        build_definitions([workflow], custom_nodes=[nodes], strict=True)


def test_external_deps_written_as_the_ui_shows_a_key_are_its_parts():
    """``external_deps={"Step": ["sample/incoming"]}`` in Python, as YAML and the UI write a key:
    the upstream asset ``sample/incoming`` (a key of two parts), not a refused name."""
    import dagster as dg

    spec = GraphbookWorkflow(
        REPO / "workflows" / "sample.json",
        custom_nodes=[REPO / "custom_nodes" / "sample"],
        external_deps={"GenerateNumbers": ["sample/incoming"]},
    )
    defs = build_definitions([spec])
    graph = defs.resolve_asset_graph()
    upstream = dg.AssetKey(["sample", "incoming"])
    assert upstream in graph.get_all_asset_keys()
    assert upstream in graph.get(dg.AssetKey(["sample", "GenerateNumbers"])).parent_keys
