"""Workflows as Dagster definitions: asset keys, deps, config schema, resources, descriptions,
jobs; and every translator hook, each overriding one name or attribute everywhere."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import dagster as dg
import pytest

from dagster_graphbook import (
    FolderSensor,
    GraphbookTranslator,
    GraphbookWorkflow,
    NodeRegistry,
    build_definitions,
    load_workflow,
)
from dagster_graphbook.model.workflow import WorkflowError
from tests.support.nodes import copy_nodes
from tests.support.paths import REPO
from tests.support.workflows import edge, resource_node, step_node, write_workflow

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
    assert set(runtime) == {"on_item_error", "retries", "retry_delay_s", "stall_warning_s"}
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
    assert set(spec.kinds) == {"python", "parquet"}  # a sink (table); no torch model
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


def test_building_leaves_the_callers_workflow_and_spec_as_they_were(repo, tmp_path):
    """``build_definitions`` fills in its own defaults (custom_nodes, notes_dir, notes_keep) and
    applies ``gpus`` and ``overridable_functions`` on copies: the caller's ``GraphbookWorkflow``
    and a ``Workflow`` given as its source stay as they were, and a spec cannot be changed."""
    spec = GraphbookWorkflow(repo / "workflows" / "sample.json")
    before = copy.deepcopy(spec)
    defs = build_definitions(
        [spec],
        custom_nodes=[repo / "custom_nodes" / "sample"],
        notes_dir=str(tmp_path / "notes"),
        notes_keep=2,
        strict=True,
    )
    assert spec == before
    assert (spec.custom_nodes, spec.notes_dir, spec.notes_keep) == ((), None, None)
    meta = (
        defs.resolve_assets_def(K(["sample", "CalcMean"]))
        .specs_by_key[K(["sample", "CalcMean"])]
        .metadata
    )  # built with the defaults all the same
    assert meta["dagster_graphbook/notes_dir"] == str(tmp_path / "notes")
    assert meta["dagster_graphbook/notes_keep"] == 2

    nightly = repo / "workflows" / "nightly_shapes.json"
    workflow = load_workflow(nightly, NodeRegistry.load([repo / "custom_nodes" / "nightly"]))
    spec = GraphbookWorkflow(workflow, gpus=1, overridable_functions=["load_fn"])
    before, workflow_before = copy.deepcopy(spec), copy.deepcopy(workflow)
    defs = build_definitions([spec], strict=True)
    assert spec == before and spec.source is workflow
    assert (workflow.gpus, workflow.overridable_functions) == ({}, ())
    assert workflow == workflow_before
    op = defs.resolve_job_def("nightly_shapes").graph.node_named("nightly_shapes__ClassifyShapes")
    assert "dagster-k8s/config" in op.definition.tags  # the GPUs reached the job

    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.notes_dir = "elsewhere"  # type: ignore[misc]
    assert spec.notes_dir is None


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


def test_resource_feeding_a_resource(tmp_path, run_wf):
    nodes = copy_nodes(tmp_path / "chain_nodes", "chain.py", "resource_chain")
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


# ---------------------------------------------------------------------------------------------
# Every translator hook, one case each (dagster-sling's pattern): the hook is overridden in a
# subclass, the sample workflow built with it, and the effect checked on the Definitions; hooks
# that name things Dagster runs by (keys, op names, resource and job names) also run for real.
# A hook added to GraphbookTranslator without a case fails test_translation_is_comprehensive.


@dataclass(frozen=True)
class Hook:
    """``override(base, *args)`` replaces ``method`` (``base`` is the inherited one, bound);
    ``check(defs)`` asserts its effect; ``run``: also run the workflow and load its notes."""

    method: str
    override: Callable[..., Any]
    check: Callable[[dg.Definitions], None]
    run: bool = False
    streaming: bool = False
    workflow_kwargs: Optional[Dict[str, Any]] = None  # e.g. partitions for the schedule hooks


def _translator(hook: Hook) -> GraphbookTranslator:
    base = getattr(GraphbookTranslator, hook.method)

    def method(self, *args):
        return hook.override(functools.partial(base, self), *args)

    return type("Overridden", (GraphbookTranslator,), {hook.method: method})()


def _specs(defs) -> Dict[dg.AssetKey, dg.AssetSpec]:
    return {s.key: s for a in defs.assets if isinstance(a, dg.AssetsDefinition) for s in a.specs}


def _ops(defs) -> Dict[str, Any]:
    return {a.op.name: a.op for a in defs.assets if isinstance(a, dg.AssetsDefinition)}


def _every_spec(predicate: Callable[[dg.AssetSpec], bool]) -> Callable[[dg.Definitions], None]:
    def check(defs):
        bad = [s.key for s in _specs(defs).values() if not predicate(s)]
        assert not bad and _specs(defs), bad

    return check


def _every_op(predicate: Callable[[Any], bool]) -> Callable[[dg.Definitions], None]:
    def check(defs):
        bad = [name for name, op in _ops(defs).items() if not predicate(op)]
        assert not bad and _ops(defs), bad

    return check


def _lake_keys(defs):
    parents = _parents(defs)
    assert all(k.path[0] == "lake" for k in parents), set(parents)
    assert parents[K(["lake", "sample", "Split", "A"])] == {K(["lake", "sample", "CalcMean"])}
    assert parents[K(["lake", "sample", "Transform"])] == {K(["lake", "sample", "GenerateNumbers"])}


def _lower_steps(defs):
    assert K(["sample", "split", "A"]) in _parents(defs)
    assert "sample__calcmean" in _ops(defs)


def _extra_dep(defs):
    parents = _parents(defs)
    assert parents[K(["sample", "GenerateNumbers"])] == {K(["warehouse", "raw"])}
    assert parents[K(["sample", "Transform"])] == {K(["sample", "GenerateNumbers"])}


def _dep_inside_the_stream(defs):
    parents = _parents(defs)[K(["sample", "CalcRunningMean"])]
    assert parents == {K(["sample", "Transform"]), K(["sample", "CalcMean"])}
    assert set(_ops(defs)) == {"sample__stream"}


def _streamed(defs):
    assert set(_ops(defs)) == {"sample_streamed"}


def _sharded(defs):
    (graph,) = [a.node_def for a in defs.assets if "ClassifyShapes" in a.node_def.name]
    op = "nightly_shapes__ClassifyShapes"
    assert {n.name for n in graph.node_defs} == {f"{op}_split", f"{op}_part", f"{op}_merge"}


def _code_references(spec):
    refs = spec.metadata["dagster/code_references"].code_references
    return [r.url for r in refs] == [f"https://example.com/{spec.key.path[1]}"]


HOOKS = [
    Hook(
        "get_asset_key",
        lambda base, wf, node, pin: base(wf, node, pin).with_prefix("lake"),
        _lake_keys,
        run=True,
    ),
    Hook(
        "get_asset_spec",
        lambda base, *a: base(*a).replace_attributes(key=base(*a).key.with_prefix("lake")),
        _lake_keys,
        run=True,
    ),
    Hook(
        "get_asset_spec",
        lambda base, *a: base(*a).replace_attributes(owners=["team:ml"]),
        _every_spec(lambda s: list(s.owners) == ["team:ml"]),
    ),
    Hook(
        "get_asset_spec",
        lambda base, wf, node, pin: base(wf, node, pin).merge_attributes(
            deps=[K(["warehouse", "raw"])] if node.name == "GenerateNumbers" else []
        ),
        _extra_dep,
        run=True,
    ),
    Hook(
        "get_asset_spec",
        lambda base, wf, node, pin: base(wf, node, pin).merge_attributes(
            deps=[K(["sample", "CalcMean"])] if node.name == "CalcRunningMean" else []
        ),
        _dep_inside_the_stream,
        streaming=True,
    ),
    Hook(
        "get_asset_spec",
        lambda base, *a: base(*a).replace_attributes(group_name="ml"),
        _every_spec(lambda s: s.group_name == "ml"),
    ),
    Hook("get_step_name", lambda base, wf, node: base(wf, node).lower(), _lower_steps, run=True),
    Hook("get_group_name", lambda base, wf: "ml", _every_spec(lambda s: s.group_name == "ml")),
    Hook(
        "get_tags",
        lambda base, wf, node: {**base(wf, node), "tier": "gold"},
        _every_spec(lambda s: s.tags["tier"] == "gold"),
    ),
    Hook(
        "get_kinds",
        lambda base, wf, node: {"python", "s3"},
        _every_spec(lambda s: set(s.kinds) == {"python", "s3"}),
    ),
    Hook(
        "get_description",
        lambda base, wf, node: f"about {node.name}",
        # a pin of a many-pin step adds what goes to that pin after the step's description
        _every_spec(
            lambda s: (
                s.description == f"about {s.key.path[1]}"
                or s.description.startswith(f"about {s.key.path[1]}\n\nNotes sent to pin `")
            )
        ),
    ),
    Hook(
        "get_metadata",
        lambda base, wf, node, pin: {**base(wf, node, pin), "team": f"ml-{pin}"},
        _every_spec(lambda s: s.metadata["team"] == f"ml-{s.metadata['graphbook'].value['pin']}"),
    ),
    Hook(
        "get_code_version",
        lambda base, wf, node: f"v-{node.id}",
        _every_spec(lambda s: s.code_version == f"v-{s.metadata['graphbook'].value['node_id']}"),
    ),
    Hook(
        "get_code_references",
        lambda base, wf, node: dg.CodeReferencesMetadataValue(
            code_references=[dg.UrlCodeReference(url=f"https://example.com/{node.name}")]
        ),
        _every_spec(_code_references),
    ),
    Hook(
        "get_op_name",
        lambda base, wf, node: f"gb_{node.name.lower()}",
        lambda defs: _assert_equal(set(_ops(defs)), {"gb_" + s.lower() for s in SAMPLE_STEPS}),
        run=True,
    ),
    Hook(
        "get_op_tags",
        lambda base, wf, node: {**base(wf, node), "team": "ml"},
        _every_op(lambda op: op.tags["team"] == "ml"),
    ),
    Hook(
        "get_pool",
        lambda base, wf, node: f"pool_{node.id}",
        _every_op(lambda op: op.pool == f"pool_{op.tags['graphbook/node_id']}"),
    ),
    Hook(
        "get_retry_policy",
        lambda base, wf, node: dg.RetryPolicy(max_retries=len(node.id)),
        _every_op(
            lambda op: (
                op.retry_policy == dg.RetryPolicy(max_retries=len(op.tags["graphbook/node_id"]))
            )
        ),
    ),
    Hook(
        "get_pin_description",
        lambda base, wf, node, pin: f"{node.name} sends {pin}",
        lambda defs: _assert_equal(
            _specs(defs)[K(["sample", "Split", "A"])].description, "Split sends A"
        ),
    ),
    Hook(
        "get_schedule_name",
        lambda base, wf, kind: f"{base(wf, kind)}_at_night",
        lambda defs: _assert_equal({s.name for s in defs.schedules}, {"sample_nightly_at_night"}),
        workflow_kwargs={"partitions_def": dg.DailyPartitionsDefinition("2026-01-01")},
    ),
    Hook(
        "get_sensor_name",
        lambda base, wf, kind: f"{kind}_of_{wf.name}",
        lambda defs: _assert_equal({s.name for s in defs.sensors}, {"new_folder_of_sample"}),
        workflow_kwargs={"sensor": FolderSensor("/nonexistent/incoming")},
    ),
    Hook(
        "get_sensor_name",
        lambda base, wf, kind: f"{kind}_of_{wf.name}",
        lambda defs: _assert_equal({s.name for s in defs.sensors}, {"automation_of_sample"}),
        workflow_kwargs={
            "partitions_def": dg.DailyPartitionsDefinition("2026-01-01"),
            "automation": "eager",
        },
    ),
    Hook(
        "get_resource_key",
        lambda base, wf, node: f"shared_{node.name.lower()}",
        lambda defs: _assert_equal(set(defs.resources) - {"graphbook_notes"}, {"shared_function"}),
        run=True,
    ),
    Hook(
        "get_job_name",
        lambda base, wf: f"{wf.name}_job",
        lambda defs: _assert_equal({j.name for j in defs.jobs}, {"sample_job"}),
        run=True,
    ),
    Hook(
        "get_job_description",
        lambda base, wf: f"nightly {wf.name}",
        lambda defs: _assert_equal(defs.resolve_job_def("sample").description, "nightly sample"),
    ),
    Hook(
        "get_stream_op_name",
        lambda base, wf: f"{wf.name}_streamed",
        _streamed,
        run=True,
        streaming=True,
    ),
    Hook(
        "get_shard_op_names",
        lambda base, wf, node, op: (f"{op}_split", f"{op}_part", f"{op}_merge"),
        _sharded,
        workflow_kwargs={
            "source": REPO / "workflows" / "nightly_shapes.json",
            "custom_nodes": [REPO / "custom_nodes" / "nightly"],
            "shards": {"ClassifyShapes": 2},
        },
    ),
]
SAMPLE_STEPS = ("GenerateNumbers", "Transform", "CalcMean", "CalcRunningMean", "Split")


def _assert_equal(actual, expected):
    assert actual == expected


def _hook_id(hook: Hook) -> str:
    return f"{hook.method}-{sum(h.method == hook.method for h in HOOKS[: HOOKS.index(hook)])}"


@pytest.fixture(scope="module")
def baseline(repo, tmp_path_factory):
    """``baseline(streaming)``: notes of the sample workflow run with the default translator."""
    from dagster_graphbook import run_workflow

    runs = {}

    def notes(streaming: bool) -> Dict[str, Any]:
        if streaming not in runs:
            run = run_workflow(
                repo / "workflows" / "sample.json",
                custom_nodes=[repo / "custom_nodes" / "sample"],
                params=SAMPLE_PARAMS,
                dagster_home=str(tmp_path_factory.mktemp("baseline_home")),
                streaming=streaming,
            )
            assert run.success, run.failure
            runs[streaming] = run.notes
        return runs[streaming]

    return notes


SAMPLE_PARAMS = {"GenerateNumbers.seed": 7, "Transform.scale": 3}


@pytest.mark.parametrize("hook", HOOKS, ids=_hook_id)
def test_translation_hook(hook: Hook, repo, tmp_path, request):
    translator = _translator(hook)
    where = {"source": repo / "workflows" / "sample.json"}
    where["custom_nodes"] = [repo / "custom_nodes" / "sample"]
    spec = GraphbookWorkflow(
        **{**where, "streaming": hook.streaming, **(hook.workflow_kwargs or {})}
    )
    defs = build_definitions([spec], translator=translator, strict=True)
    defs.resolve_all_job_defs()
    hook.check(defs)
    if not hook.run:
        return
    from dagster_graphbook import run_workflow

    home = str(tmp_path / "home")
    run = run_workflow(
        spec.source,
        custom_nodes=spec.custom_nodes,
        params=SAMPLE_PARAMS,
        dagster_home=home,
        translator=translator,
        streaming=hook.streaming,
    )
    assert run.success, run.failure
    baseline = request.getfixturevalue("baseline")(hook.streaming)
    workflow = load_workflow(spec.source, NodeRegistry.load(spec.custom_nodes))
    steps, default = translator.names(workflow).steps, GraphbookTranslator().names(workflow).steps
    with dg.DagsterInstance.from_config(home) as instance:  # every asset under its new key
        for step in steps.values():
            for pin in step.specs:
                assert instance.get_latest_materialization_event(step.key(pin)), step.key(pin)
    assert run.notes == {steps[n].step: baseline[default[n].step] for n in steps}


def test_translation_is_comprehensive():
    """Every public ``get_*`` hook has a case above (add one line to HOOKS for a new hook)."""
    hooks = {
        name
        for name, _ in inspect.getmembers(GraphbookTranslator, inspect.isfunction)
        if name.startswith("get_")
    }
    untested = hooks - {h.method for h in HOOKS}
    assert not untested, f"translator hooks without a case in HOOKS: {sorted(untested)}"


CODE_LOCATION = """
import dagster as dg
from dagster_graphbook import GraphbookTranslator, GraphbookWorkflow, StepCheck, build_definitions


class Lake(GraphbookTranslator):
    def get_asset_spec(self, workflow, node, pin):
        spec = super().get_asset_spec(workflow, node, pin)
        return spec.replace_attributes(key=spec.key.with_prefix("lake"), owners=["team:ml"])

    def get_op_name(self, workflow, node):
        return "gb_" + self.step_names(workflow)[node.id].lower()


defs = build_definitions(
    [
        GraphbookWorkflow(
            {wf!r},
            custom_nodes=[{nodes!r}],
            streaming={streaming},
            checks=[] if {streaming} else [StepCheck(step="Transform", metric="row_count", min=1)],
        )
    ],
    translator=Lake(),
    strict=True,
)
"""


@pytest.mark.parametrize("streaming", [False, True], ids=["step_ops", "streaming"])
def test_overridden_names_materialize_from_the_code_location(
    streaming, repo, tmp_path, monkeypatch, dagster_home, baseline
):
    """``dagster-graphbook materialize`` of a code location whose translator renames keys and
    ops: ``--set`` reaches the step, materializations land on the translator's keys and the
    notes load back under the step names."""
    from dagster_graphbook.cli.main import main
    from dagster_graphbook.runner.run import run_job

    module = f"lake_location_{streaming}"
    (tmp_path / f"{module}.py").write_text(
        CODE_LOCATION.format(
            wf=str(repo / "workflows" / "sample.json"),
            nodes=str(repo / "custom_nodes" / "sample"),
            streaming=streaming,
        )
    )
    monkeypatch.chdir(tmp_path)
    sets = [x for k, v in SAMPLE_PARAMS.items() for x in ("--set", f"{k}={v}")]
    args = ["materialize", "sample", "--module", module, "--dagster-home", dagster_home]
    assert main([*args, *sets, "--no-progress"]) == 0
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        (record,) = instance.get_run_records()
        assert instance.get_latest_materialization_event(K(["lake", "sample", "Split", "A"]))
        assert not instance.get_latest_materialization_event(K(["sample", "Split", "A"]))
        if not streaming:  # the check sits on the translator's key
            check = dg.AssetCheckKey(K(["lake", "sample", "Transform"]), "row_count_min_1")
            assert instance.get_latest_asset_check_evaluation_record(check).evaluation.passed
        run = run_job("sample", SAMPLE_PARAMS, module=module, instance=instance)
        assert run.success, run.failure
        stored = {s: p for s, p in run.notes.items() if p}  # a streamed pin keeps no notes
        assert stored == {s: p for s, p in baseline(streaming).items() if p}
        with pytest.raises(WorkflowError, match="STEP one of CalcMean, CalcRunningMean"):
            run_job("sample", {"Nope.scale": 1}, module=module, instance=instance)
    ops = {e.step_key for e in instance.all_logs(record.dagster_run.run_id) if e.step_key}
    assert ops == ({"sample__stream"} if streaming else {f"gb_{s.lower()}" for s in SAMPLE_STEPS})


def test_colliding_keys_name_the_steps_and_pins(repo):
    class OneKey(GraphbookTranslator):
        def get_asset_spec(self, workflow, node, pin):
            return super().get_asset_spec(workflow, node, pin).replace_attributes(key="same")

    with pytest.raises(WorkflowError) as exc:
        build_definitions(
            [repo / "workflows" / "sample.json"],
            custom_nodes=[repo / "custom_nodes" / "sample"],
            translator=OneKey(),
            strict=True,
        )
    message = str(exc.value)
    assert "sample.json" in message and "have the same asset key 'same'" in message
    assert "step 'Transform' (node 7), pin 'out'" in message


def test_broken_workflow_job_is_named_by_the_translator(tmp_path, repo):
    """A workflow that fails to load stands as a job named as the translator names jobs, so
    the UI shows it where the working job would be."""

    class Suffixed(GraphbookTranslator):
        def get_job_name(self, workflow):
            return f"{workflow.name}_job"

    broken = tmp_path / "broken_flow.json"
    broken.write_text('{"nodes": {"1": {"type": "step", "name": "NoSuchStep"}}}')
    defs = build_definitions(
        [repo / "workflows" / "sample.json", broken],
        custom_nodes=[repo / "custom_nodes" / "sample"],
        translator=Suffixed(),
    )
    assert defs.resolve_job_def("sample_job") is not None
    job = defs.resolve_job_def("broken_flow_job")
    assert "FAILED TO LOAD" in job.description and "broken_flow.json" in job.description
    with pytest.raises(dg.DagsterInvariantViolationError):
        defs.resolve_job_def("broken_flow")


def test_colliding_resource_keys_name_the_nodes(tmp_path, repo):
    class OneResource(GraphbookTranslator):
        def get_resource_key(self, workflow, node):
            return "shared"

    path = write_workflow(
        tmp_path,
        "two_resources",
        [
            step_node("1", "GenerateNumbers", {"amount": 2}, source=True),
            resource_node("r1", "Number", {"val": 1}),
            resource_node("r2", "Number", {"val": 2}),
        ],
        [],
    )
    with pytest.raises(WorkflowError) as exc:
        build_definitions(
            [path],
            custom_nodes=[repo / "custom_nodes" / "sample"],
            translator=OneResource(),
            strict=True,
        )
    assert "two_resources.json" in str(exc.value)
    assert "resource nodes r1 and r2 have the same resource key 'shared'" in str(exc.value)


MP_TRANSLATOR = """
from dagster_graphbook import GraphbookTranslator


class Renamed(GraphbookTranslator):
    def get_asset_spec(self, workflow, node, pin):
        spec = super().get_asset_spec(workflow, node, pin)
        return spec.replace_attributes(key=spec.key.with_prefix("mp"))

    def get_op_name(self, workflow, node):
        return "mp_" + self.step_names(workflow)[node.id]
"""


def test_multiprocess_runs_rebuild_the_translator(repo, tmp_path, monkeypatch, baseline):
    """Each step process rebuilds the run's translator from its module, so the job it rebuilds
    has the same keys and op names; a translator it cannot import is refused up front."""
    import importlib

    from dagster_graphbook import run_workflow

    (tmp_path / "mp_translator.py").write_text(MP_TRANSLATOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    translator = importlib.import_module("mp_translator").Renamed()
    home = str(tmp_path / "home")
    kwargs = dict(params=SAMPLE_PARAMS, dagster_home=home, executor="multiprocess")
    sample, nodes = repo / "workflows" / "sample.json", [repo / "custom_nodes" / "sample"]
    run = run_workflow(sample, nodes, translator=translator, **kwargs)
    assert run.success, run.failure
    assert run.notes == baseline(False)
    with dg.DagsterInstance.from_config(home) as instance:
        assert instance.get_latest_materialization_event(K(["mp", "sample", "Split", "B"]))
        steps = {e.step_key for e in instance.all_logs(run.run_id) if e.step_key}
    assert steps == {f"mp_{s}" for s in SAMPLE_STEPS}

    class Local(GraphbookTranslator):
        pass

    with pytest.raises(
        ValueError, match=r"define .*Local at the top level of an importable module"
    ):
        run_workflow(sample, nodes, translator=Local(), **kwargs)


def test_cli_takes_a_translator(repo, tmp_path, monkeypatch, capsys, dagster_home):
    """``--translator MODULE:CLASS``: validate lists its keys, run records on them; a bad path is
    refused with a message naming it."""
    from dagster_graphbook.cli.main import main

    (tmp_path / "cli_translator.py").write_text(MP_TRANSLATOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    wf = [str(repo / "workflows" / "sample.json"), "--custom-nodes"]
    wf.append(str(repo / "custom_nodes" / "sample"))
    assert main(["validate", *wf, "--translator", "cli_translator:Renamed"]) == 0
    assert "  asset mp/sample/Split/A\n" in capsys.readouterr().out
    run = ["run", *wf, "--no-progress", "--dagster-home", dagster_home]
    assert main([*run, "--translator", "cli_translator:Nope"]) == 2
    assert "translator 'cli_translator:Nope': AttributeError" in capsys.readouterr().err
    assert main([*run, "--translator", "cli_translator:Renamed"]) == 0
    out = capsys.readouterr().out  # notes loaded back under the step name
    assert re.search(r"^  Split +A: [1-9]\d* notes, B: [1-9]\d* notes$", out, re.M), out
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        assert instance.get_latest_materialization_event(K(["mp", "sample", "Split", "B"]))
