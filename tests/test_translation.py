"""Workflows as Dagster definitions: asset keys, deps, config schema, resources, descriptions, jobs."""

from __future__ import annotations

import dagster as dg
import pytest
from conftest import edge, resource_node, step_node, write_nodes, write_workflow

from dagster_graphbook import (
    GraphbookTranslator,
    GraphbookWorkflow,
    NodeRegistry,
    build_definitions,
    load_workflow,
)

K = dg.AssetKey


@pytest.fixture(scope="module")
def sample_defs(repo):
    return build_definitions(
        [repo / "workflows" / "sample.json"], custom_nodes=[repo / "custom_nodes" / "sample"]
    )


def _asset_for(defs, key):
    (a,) = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and key in a.keys]
    return a


def _parents(defs):
    graph = defs.resolve_asset_graph()
    return {k: set(graph.get(k).parent_keys) for k in graph.get_all_asset_keys()}


def test_sample_asset_keys(sample_defs):
    keys = set(sample_defs.resolve_asset_graph().get_all_asset_keys())
    assert keys == {
        K(["sample", "GenerateNumbers"]),
        K(["sample", "Transform"]),
        K(["sample", "CalcMean"]),
        K(["sample", "CalcRunningMean"]),
        K(["sample", "Split", "A"]),
        K(["sample", "Split", "B"]),
    }


def test_asset_deps_are_workflow_edges(repo, sample_defs):
    wf = load_workflow(
        repo / "workflows" / "sample.json", NodeRegistry.load([repo / "custom_nodes" / "sample"])
    )
    t = GraphbookTranslator()
    expected = {}
    for node in wf.steps():
        parents = {t.get_asset_key(wf, wf.nodes[src], pin) for src, pin in node.inputs}
        for pin in node.outputs:
            expected[t.get_asset_key(wf, node, pin)] = parents
    assert _parents(sample_defs) == expected
    assert expected[K(["sample", "Split", "A"])] == {K(["sample", "CalcMean"])}
    assert expected[K(["sample", "CalcRunningMean"])] == {K(["sample", "Transform"])}
    assert expected[K(["sample", "GenerateNumbers"])] == set()


def test_one_multi_asset_op_per_step(sample_defs):
    split = _asset_for(sample_defs, K(["sample", "Split", "A"]))
    assert set(split.keys) == {K(["sample", "Split", "A"]), K(["sample", "Split", "B"])}
    assert split.op.name == "sample__Split"
    assert {a.op.name for a in sample_defs.assets} == {
        f"sample__{s}"
        for s in ("GenerateNumbers", "Transform", "CalcMean", "CalcRunningMean", "Split")
    }
    assert split.op.tags["graphbook/node_id"] == "3"
    assert split.group_names_by_key[K(["sample", "Split", "A"])] == "sample"


def test_op_config_defaults_equal_workflow_values(sample_defs):
    fields = _asset_for(sample_defs, K(["sample", "Transform"])).op.config_schema.config_type.fields
    assert set(fields) == {"scale", "shift", "runtime"}
    assert fields["scale"].default_value == 2 and fields["shift"].default_value == 1
    gen = _asset_for(
        sample_defs, K(["sample", "GenerateNumbers"])
    ).op.config_schema.config_type.fields
    assert (
        gen["amount"].default_value == 200
    )  # the workflow's value, not the decorator default 1000
    assert gen["seed"].default_value is None and not gen["seed"].is_required
    runtime = gen["runtime"].config_type.fields
    assert set(runtime) == {"on_item_error", "retries", "retry_delay_s"}
    assert runtime["on_item_error"].default_value == "raise"
    # a resource-bound parameter has no config field
    split_fields = _asset_for(
        sample_defs, K(["sample", "Split", "A"])
    ).op.config_schema.config_type.fields
    assert set(split_fields) == {"runtime"}


def test_batch_step_config_and_kinds(repo):
    defs = build_definitions(
        [repo / "workflows" / "word_split.json"],
        custom_nodes=[repo / "custom_nodes" / "word_split"],
    )
    asset = _asset_for(defs, K(["word_split", "SplitWords", "OutputFiles"]))
    assert set(asset.keys) == {
        K(["word_split", "SplitWords", "OutputFiles"]),
        K(["word_split", "SplitWords", "Metadata"]),
    }
    fields = asset.op.config_schema.config_type.fields
    assert {
        k: fields[k].default_value for k in ("batch_size", "item_key", "part_len", "output_dir")
    } == {"batch_size": 4, "item_key": "path", "part_len": 4, "output_dir": "outputs/word_split"}
    runtime = fields["runtime"].config_type.fields
    assert {
        "num_workers",
        "worker_type",
        "prefetch",
        "start_method",
        "device",
        "on_item_error",
    } <= set(runtime)
    assert (
        runtime["num_workers"].default_value == 2
        and runtime["worker_type"].default_value == "process"
    )
    spec = asset.specs_by_key[K(["word_split", "SplitWords", "OutputFiles"])]
    assert set(spec.kinds) == {"python", "pytorch"}
    assert spec.tags["graphbook/step_kind"] == "batch"
    src_spec = _asset_for(defs, K(["word_split", "InputFiles"])).specs_by_key[
        K(["word_split", "InputFiles"])
    ]
    assert set(src_spec.kinds) == {"python"}
    assert src_spec.metadata["graphbook"].value["sink"] is False
    assert spec.metadata["graphbook"].value["sink"] is True


def test_resources_one_per_resource_node(repo, sample_defs):
    assert set(sample_defs.resources) == {"graphbook_notes", "sample__Function"}
    split = _asset_for(sample_defs, K(["sample", "Split", "A"]))
    assert split.required_resource_keys - {"graphbook_notes"} == {"sample__Function"}
    defs = build_definitions(
        [
            GraphbookWorkflow(
                repo / "workflows" / "simple_class.json",
                custom_nodes=[repo / "custom_nodes" / "simple_class"],
            )
        ]
    )
    assert "simple_class__Number" in defs.resources


def test_descriptions_from_docstrings(sample_defs, repo):
    transform = _asset_for(sample_defs, K(["sample", "Transform"]))
    desc = transform.descriptions_by_key[K(["sample", "Transform"])]
    assert desc.startswith("Applies a linear transformation `num * scale + shift`")
    assert not desc.startswith(" ")  # cleaned
    assert transform.op.description == desc
    split_desc = _asset_for(sample_defs, K(["sample", "Split", "B"])).descriptions_by_key[
        K(["sample", "Split", "B"])
    ]
    assert "Routes a note to A" in split_desc
    job = sample_defs.resolve_job_def("sample")
    assert (
        "sample" in job.description and str(repo / "workflows" / "sample.json") in job.description
    )
    graph_defs = build_definitions(
        [repo / "workflows" / "sample_graph.py"], custom_nodes=[repo / "custom_nodes" / "sample"]
    )
    assert graph_defs.resolve_job_def("sample_graph").description.startswith("# Sample workflow")


def test_one_job_per_workflow(repo):
    defs = build_definitions(
        [
            GraphbookWorkflow(
                repo / "workflows" / "sample.json", custom_nodes=[repo / "custom_nodes" / "sample"]
            ),
            GraphbookWorkflow(
                repo / "workflows" / "simple_functional.json",
                custom_nodes=[repo / "custom_nodes" / "simple_functional"],
            ),
            GraphbookWorkflow(
                repo / "workflows" / "simple_class.json",
                custom_nodes=[repo / "custom_nodes" / "simple_class"],
            ),
        ]
    )
    names = {j.name for j in defs.jobs}
    assert names == {"sample", "simple_functional", "simple_class"}
    job = defs.resolve_job_def("simple_class")
    assert {n.name for n in job.graph.node_defs} == {
        "simple_class__MyFirstSource",
        "simple_class__MyFirstStep",
    }
    keys = set(defs.resolve_asset_graph().get_all_asset_keys())
    assert (
        K(["simple_class", "MyFirstStep", "A"]) in keys
        and K(["simple_functional", "MyFirstStep", "B"]) in keys
    )
    assert (
        K(["simple_class", "MyFirstSource", "message"]) in keys
    )  # a single pin not named "out" keeps the pin
    assert K(["simple_functional", "MyFirstSource"]) in keys
    assert {"simple_class__Number", "simple_functional__Number", "sample__Function"} <= set(
        defs.resources
    )


def test_custom_translator_changes_keys(repo):
    class Flat(GraphbookTranslator):
        def get_asset_key(self, workflow, node, pin):
            step = self.step_names(workflow)[node.id]
            return dg.AssetKey(["lake", f"{step.lower()}_{pin.lower()}"])

    defs = build_definitions(
        [repo / "workflows" / "sample.json"],
        custom_nodes=[repo / "custom_nodes" / "sample"],
        translator=Flat(),
    )
    parents = _parents(defs)
    assert set(parents) == {
        K(["lake", x])
        for x in (
            "generatenumbers_out",
            "transform_out",
            "calcmean_out",
            "calcrunningmean_out",
            "split_a",
            "split_b",
        )
    }
    assert parents[K(["lake", "split_a"])] == {K(["lake", "calcmean_out"])}
    assert parents[K(["lake", "transform_out"])] == {K(["lake", "generatenumbers_out"])}


def test_duplicate_step_names_made_unique(tmp_path, repo):
    path = write_workflow(
        tmp_path,
        "TwoSources",
        [
            step_node("a", "GenerateNumbers", {"amount": 2}, source=True),
            step_node("b", "GenerateNumbers", {"amount": 3}, source=True),
            step_node("c", "CalcMean"),
        ],
        [edge("a", "out", "c"), edge("b", "out", "c")],
    )
    defs = build_definitions([path], custom_nodes=[repo / "custom_nodes" / "sample"])
    parents = _parents(defs)
    assert parents[K(["two_sources", "CalcMean"])] == {
        K(["two_sources", "GenerateNumbers_a"]),
        K(["two_sources", "GenerateNumbers_b"]),
    }


def test_fan_in_alternates_parents_starting_with_the_first_edge(tmp_path, repo, run_wf):
    """Graphbook takes one note from each parent in turn (issue #10.8); its first parent is
    arbitrary (a set), ours the first edge's."""
    path = write_workflow(
        tmp_path,
        "fan_in",
        [
            step_node("1", "GenerateNumbers", {"amount": 2, "seed": 1}, source=True, label="G1"),
            step_node("2", "GenerateNumbers", {"amount": 3, "seed": 2}, source=True, label="G2"),
            step_node("3", "CalcMean"),
        ],
        [edge("2", "out", "3"), edge("1", "out", "3")],
    )
    defs = build_definitions([path], custom_nodes=[repo / "custom_nodes" / "sample"])
    assert _parents(defs)[K(["fan_in", "CalcMean"])] == {K(["fan_in", "G1"]), K(["fan_in", "G2"])}
    run = run_wf(path, custom_nodes=[repo / "custom_nodes" / "sample"])
    assert run.success, run.failure
    assert run.counts() == {"G1": {"out": 2}, "G2": {"out": 3}, "CalcMean": {"out": 5}}
    merged = [n["numbers"] for n in run.notes["CalcMean"]["out"]]
    g1, g2 = ([n["numbers"] for n in run.notes[g]["out"]] for g in ("G1", "G2"))
    assert merged == [g2[0], g1[0], g2[1], g1[1], g2[2]]
    assert all(n["mean"] == sum(n["numbers"]) / 4 for n in run.notes["CalcMean"]["out"])


RESOURCE_CHAIN_NODES = """
from graphbook import step, param, resource, source


@resource("Chain/Scaled")
@param("base", "resource", description="bind a Number")
@param("factor", "number", default=2)
def scaled(ctx):
    '''base * factor'''
    return ctx.base * ctx.factor


@step("Chain/Emit")
@source()
@param("n", "number", default=2)
def emit(ctx):
    for i in range(int(ctx.n)):
        yield {"out": {"i": i}}


@step("Chain/UseValue")
@param("value", "resource")
def use_value(ctx, data):
    data["value"] = ctx.value
"""


def test_resource_feeding_a_resource(tmp_path, run_wf):
    nodes = write_nodes(tmp_path / "chain_nodes", "chain.py", RESOURCE_CHAIN_NODES)
    path = write_workflow(
        tmp_path,
        "chain",
        [
            step_node("1", "Emit", {"n": 3}, source=True),
            step_node("2", "UseValue"),
            resource_node("3", "Number", {"val": 1.5}),
            resource_node("4", "Scaled", {"factor": 4}),
        ],
        [
            edge("1", "out", "2"),
            edge("4", "resource", "2", "value"),
            edge("3", "resource", "4", "base"),
        ],
    )
    defs = build_definitions([path], custom_nodes=[nodes])
    assert {"chain__Number", "chain__Scaled"} <= set(defs.resources)
    assert defs.resources["chain__Scaled"].required_resource_keys == {"chain__Number"}
    assert _asset_for(defs, K(["chain", "UseValue"])).required_resource_keys - {
        "graphbook_notes"
    } == {"chain__Scaled"}
    run = run_wf(path, custom_nodes=[nodes])
    assert run.success, run.failure
    assert [n["value"] for n in run.notes["UseValue"]["out"]] == [6.0, 6.0, 6.0]
