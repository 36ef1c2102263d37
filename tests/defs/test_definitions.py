"""Building definitions does work linear in the number of steps (issue 20.8), counted, not timed.

A 1,000-step chain took 2.9x a 500-step one: per step, ``Workflow.children`` scanned every node's
inputs and the code reference re-read the whole workflow file; and the cyclic GC walked the heap
over and over while Dagster sorted the job's steps. The tests count that work (input list scans,
workflow file bytes read at N and 2N steps) and check the GC is paused there; timings are in
``benchmarks/bench_definitions.py``."""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from dagster_graphbook.model.registry import NodeRegistry
from dagster_graphbook.model.workflow import WorkflowError, load_workflow
from tests.conftest import CHAIN_NODES, REPO, chain_workflow, write_nodes


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
    nodes = write_nodes(tmp_path / "nodes", "chain_nodes.py", CHAIN_NODES)
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
    nodes = write_nodes(tmp_path / "nodes", "chain_nodes.py", CHAIN_NODES)
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
    nodes = write_nodes(tmp_path / "nodes", "chain_nodes.py", CHAIN_NODES)
    build_definitions([GraphbookWorkflow(_chain(tmp_path, 20), custom_nodes=[nodes])], strict=True)
    assert gc_on_while_sorting and not any(gc_on_while_sorting)
    assert gc.isenabled()


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
