"""Code versions and code references of workflow assets; "Unsynced" after a parameter edit."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from tests.support.paths import REPO

SAMPLE_NODES = REPO / "custom_nodes" / "sample"


@pytest.fixture
def sample(tmp_path: Path):
    """A copy of the sample workflow and its node file, free to edit."""
    wf = tmp_path / "sample.json"
    shutil.copy(REPO / "workflows" / "sample.json", wf)
    nodes = tmp_path / "nodes"
    shutil.copytree(SAMPLE_NODES, nodes)
    return wf, nodes


def _versions(wf: Path, nodes: Path) -> dict:
    defs = build_definitions([GraphbookWorkflow(wf, custom_nodes=[nodes])])
    graph = defs.resolve_asset_graph()
    return {k.to_user_string(): graph.get(k).code_version for k in graph.get_all_asset_keys()}


def _set_param(wf: Path, node: str, param: str, value) -> None:
    data = json.loads(wf.read_text())
    entry = next(n for n in data["nodes"] if n["data"]["name"] == node)
    entry["data"]["parameters"][param]["value"] = value
    wf.write_text(json.dumps(data, indent=2))


def test_every_asset_has_a_code_version(sample):
    versions = _versions(*sample)
    assert set(versions) == {
        "sample/GenerateNumbers",
        "sample/Transform",
        "sample/CalcMean",
        "sample/CalcRunningMean",
        "sample/Split/A",
        "sample/Split/B",
    }
    assert all(isinstance(v, str) and len(v) == 16 for v in versions.values())
    assert versions["sample/Split/A"] == versions["sample/Split/B"]  # one op, one version
    assert _versions(*sample) == versions  # stable across loads


def test_parameter_edit_changes_only_that_steps_version(sample):
    wf, nodes = sample
    before = _versions(wf, nodes)
    _set_param(wf, "Transform", "scale", 3)
    after = _versions(wf, nodes)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"sample/Transform"}


def test_step_code_edit_changes_its_version(sample):
    wf, nodes = sample
    before = _versions(wf, nodes)
    source = nodes / "sample_nodes.py"
    text = source.read_text()
    marker = "def calc_mean(ctx, data):\n"
    assert marker in text
    source.write_text(text.replace(marker, marker + '    data["edited"] = True\n'))
    after = _versions(wf, nodes)
    assert after["sample/CalcMean"] != before["sample/CalcMean"]


def test_code_references_point_at_the_step_and_the_workflow_node(sample):
    wf, nodes = sample
    defs = build_definitions([GraphbookWorkflow(wf, custom_nodes=[nodes])])
    node = defs.resolve_asset_graph().get(dg.AssetKey(["sample", "Transform"]))
    refs = node.metadata["dagster/code_references"].code_references
    by_file = {Path(r.file_path).name: r for r in refs}
    step = by_file["sample_nodes.py"]
    lines = (nodes / "sample_nodes.py").read_text().splitlines()
    assert lines[step.line_number - 1].startswith('@step("Transform")')
    node_line = (wf.read_text().splitlines())[by_file["sample.json"].line_number - 1]
    assert '"id": "7"' in node_line  # Transform is node 7


@pytest.mark.ui
def test_asset_shows_unsynced_after_a_parameter_edit(sample, tmp_path, dagster_home):
    """What the UI reads (GraphQL staleStatus): after the edit, the edited step is stale for its
    code ("Unsynced"); the step above it stays fresh."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    wf, nodes = sample
    location = tmp_path / "location.py"
    location.write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(wf)!r}, custom_nodes=[{str(nodes)!r}])],"
        f" notes_dir={str(tmp_path / 'notes')!r})\n"
    )
    defs = build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes])], notes_dir=str(tmp_path / "notes")
    )
    config = {"ops": {"sample__GenerateNumbers": {"config": {"amount": 8}}}}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        assert (
            defs.resolve_job_def("sample")
            .execute_in_process(run_config=config, instance=instance)
            .success
        )
        _set_param(wf, "Transform", "shift", 5)
        query = "{ assetNodes { assetKey { path } staleStatus staleCauses { category } } }"
        with define_out_of_process_context(str(location), "defs", instance) as context:
            nodes_ = execute_dagster_graphql(context, query).data["assetNodes"]
    status = {
        "/".join(n["assetKey"]["path"]): (
            n["staleStatus"],
            sorted({c["category"] for c in n["staleCauses"]}),
        )
        for n in nodes_
    }
    assert status["sample/GenerateNumbers"] == ("FRESH", [])
    assert status["sample/Transform"] == ("STALE", ["CODE"])


def test_a_function_value_gives_the_same_version_wherever_it_is_loaded():
    """A ``Graph`` may pass a function as a parameter value; each step process (a shard's)
    loads it at another address, and the version, which the commit compares across shards,
    must not change with it."""
    from dagster_graphbook.model.workflow import WorkflowNode
    from dagster_graphbook.plan.code_version import node_code_version

    def make():
        def resize(x):
            return x

        return resize

    first, second = make(), make()
    assert repr(first) != repr(second)  # two objects, two addresses
    cls = type("Step", (), {})
    versions = {
        node_code_version(WorkflowNode("1", "step", "Step", cls, values={"fn": fn}))
        for fn in (first, second)
    }
    assert len(versions) == 1, versions


def test_a_set_value_gives_the_same_version_under_every_hash_seed(tmp_path):
    """A set's order changes with the process's hash seed: each step process has its own."""
    import subprocess
    import sys

    script = (
        "from dagster_graphbook.model.workflow import WorkflowNode\n"
        "from dagster_graphbook.plan.code_version import node_code_version\n"
        "values = {'labels': {'cat', 'dog', 'bird', 'fish', 'horse', 'cow', 'owl'}}\n"
        "print(node_code_version(WorkflowNode('1', 'step', 'Step', int, values=values)))\n"
    )
    versions = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(versions) == 1, versions
