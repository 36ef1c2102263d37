"""GPU requests from one setting and from ``graphbook.ray.options`` on classes: op tags that the
Kubernetes, Ray and Dask executors read."""

from __future__ import annotations

import json
import logging

import pytest

from dagster_graphbook import GraphbookWorkflow, WorkflowError, build_definitions
from dagster_graphbook.authoring import Graph
from dagster_graphbook.authoring.resources import Resource
from dagster_graphbook.authoring.steps import SourceStep, Step
from tests.support.defs_folder import load_defs_folder
from tests.support.paths import REPO

NIGHTLY = REPO / "workflows" / "nightly_shapes.json"
NODES = [REPO / "custom_nodes" / "nightly"]
K8S_ONE = {"container_config": {"resources": {"limits": {"nvidia.com/gpu": "1"}}}}


def _op_tags(defs, job: str = "nightly_shapes") -> dict:
    """Step -> op tags, JSON values decoded (Dagster stores dict tag values as JSON strings, which
    is what the executors parse)."""

    def decode(value: str):
        return json.loads(value) if value.startswith("{") else value

    return {
        node.name.split("__", 1)[1]: {k: decode(v) for k, v in node.definition.tags.items()}
        for node in defs.resolve_job_def(job).graph.nodes
    }


def test_workflow_gpus_tag_every_batch_step_for_each_executor():
    tags = _op_tags(build_definitions([GraphbookWorkflow(NIGHTLY, custom_nodes=NODES, gpus=1)]))
    for step in ("ClassifyShapes", "SaveResized"):
        assert tags[step]["dagster-k8s/config"] == K8S_ONE
        assert tags[step]["dagster-ray/config"] == {"num_gpus": 1}
        assert tags[step]["dagster-dask/resource_requirements"] == {"GPU": 1}
    for step in ("IncomingImages", "ReviewSplit"):
        assert not any(
            k.startswith(("dagster-k8s", "dagster-ray", "dagster-dask")) for k in tags[step]
        ), tags[step]


def test_per_step_gpus_and_errors():
    tags = _op_tags(
        build_definitions(
            [GraphbookWorkflow(NIGHTLY, custom_nodes=NODES, gpus={"ClassifyShapes": 2, "4": 0})]
        )
    )
    assert tags["ClassifyShapes"]["dagster-ray/config"] == {"num_gpus": 2}
    assert tags["ClassifyShapes"]["dagster-k8s/config"]["container_config"]["resources"][
        "limits"
    ] == {"nvidia.com/gpu": "2"}
    assert "dagster-dask/resource_requirements" not in tags["SaveResized"]
    with pytest.raises(WorkflowError, match="gpus names step 'Nope'"):
        build_definitions(
            [GraphbookWorkflow(NIGHTLY, custom_nodes=NODES, gpus={"Nope": 1})], strict=True
        )
    with pytest.raises(WorkflowError, match="whole number of GPUs"):
        build_definitions([GraphbookWorkflow(NIGHTLY, custom_nodes=NODES, gpus=-1)], strict=True)


def test_gpus_in_the_yaml_component(tmp_path):
    yaml = f"""
        type: dagster_graphbook.GraphbookWorkflowComponent
        attributes:
          workflow: {NIGHTLY}
          custom_nodes: [{NODES[0]}]
          gpus: 1
    """
    tags = _op_tags(load_defs_folder(tmp_path, "gpu_location", {"nightly": yaml}))
    assert tags["ClassifyShapes"]["dagster-ray/config"] == {"num_gpus": 1}


def test_executor_libraries_read_the_tags():
    """Where the executor packages are installed, their own parsers read what we wrote."""
    job = build_definitions(
        [GraphbookWorkflow(NIGHTLY, custom_nodes=NODES, gpus=1)]
    ).resolve_job_def("nightly_shapes")
    tags = next(n.definition.tags for n in job.graph.nodes if n.name.endswith("ClassifyShapes"))
    checked = 0
    try:
        from dagster_dask.executor import get_dask_resource_requirements
    except ImportError:
        pass
    else:
        assert get_dask_resource_requirements(tags) == {"GPU": 1}
        checked += 1
    try:
        from dagster_k8s.job import get_user_defined_k8s_config
    except ImportError:
        pass
    else:
        config = get_user_defined_k8s_config(tags)
        assert config.container_config["resources"]["limits"]["nvidia.com/gpu"] == "1"
        checked += 1
    try:
        from dagster_ray.configs import RayExecutionConfig
    except ImportError:
        pass
    else:
        assert RayExecutionConfig.from_tags(tags).num_gpus == 1
        checked += 1
    if not checked:
        pytest.skip(
            "none of dagster-dask, dagster-ray, dagster-k8s is installed "
            "(pip install -e '.[distributed]')"
        )


# ---------------------------------------------------------------------------------------------
# graphbook.ray.options on classes (stored as Graphbook's ``Ray_Options``): the same op tags


class _Numbers(SourceStep):
    Outputs = ["out"]

    def load(self):
        return {"out": [{"i": 0}]}


class _Model(Resource):
    Ray_Options = {"num_gpus": 2, "resources": {"ssd": 1}, "accelerator_type": "A100"}

    def value(self):
        return "m"


class _Embed(Step):
    Parameters = {"model": {"type": "resource"}}
    Ray_Options = {"num_gpus": 1, "num_cpus": 4, "resources": {"ssd": 0.5, "tpu": 1}}

    def __init__(self, model=None):
        super().__init__()


class _Tag(Step):
    Ray_Options = {"num_cpus": 2, "max_restarts": 3, "runtime_env": {"env_vars": {"A": "1"}}}


def _graph() -> Graph:
    g = Graph()
    numbers = g.step(_Numbers)
    model = g.resource(_Model)
    g.step(_Embed).param("model", model).bind(numbers)
    g.step(_Tag).bind(numbers)
    g.name = "ray_opts"
    return g


def _ops(spec: GraphbookWorkflow) -> dict:
    defs = build_definitions([spec])
    job = defs.resolve_job_def("ray_opts")
    return {
        node.name.split("__", 1)[1]: (
            {k: json.loads(v) if v.startswith("{") else v for k, v in node.definition.tags.items()},
            node.definition.pool,
        )
        for node in job.graph.nodes
    }


def test_ray_options_of_a_step_and_its_resources_become_its_op_tags_and_gpu_pool():
    """The step asks for the largest amount of each of its own and its resources' options (the
    resource is built in the step's process); GPUs for every executor, the rest for Ray."""
    ops = _ops(GraphbookWorkflow(_graph()))
    tags, pool = ops["Embed"]
    assert tags["dagster-ray/config"] == {
        "num_gpus": 2,
        "num_cpus": 4,
        "resources": {"ssd": 1, "tpu": 1, "accelerator_type:A100": 0.001},
    }
    assert tags["dagster-k8s/config"] == {
        "container_config": {"resources": {"limits": {"nvidia.com/gpu": "2"}}}
    }
    assert tags["dagster-dask/resource_requirements"] == {"GPU": 2}
    assert pool == "gpu"  # a plain step asking for GPUs shares the GPU pool
    tags, pool = ops["Tag"]
    assert tags["dagster-ray/config"] == {"num_cpus": 2, "runtime_env": {"env_vars": {"A": "1"}}}
    assert not {"dagster-k8s/config", "dagster-dask/resource_requirements"} & set(tags)
    assert pool is None
    tags, pool = ops["Numbers"]
    assert not any(k.startswith("dagster-") and k != "dagster_graphbook/steps" for k in tags)
    try:
        from dagster_ray.configs import RayExecutionConfig
    except ImportError:
        return
    raw = build_definitions([GraphbookWorkflow(_graph())]).resolve_job_def("ray_opts")
    embed = next(n for n in raw.graph.nodes if n.name.endswith("_Embed")).definition.tags
    read = RayExecutionConfig.from_tags(embed)  # what dagster-ray's executor submits the job with
    assert (read.num_gpus, read.num_cpus, read.resources["tpu"]) == (2, 4, 1)


def test_the_workflow_gpus_setting_wins_over_ray_options():
    ops = _ops(GraphbookWorkflow(_graph(), gpus={"Embed": 0, "Tag": 1}))
    assert "num_gpus" not in ops["Embed"][0]["dagster-ray/config"]
    assert "dagster-k8s/config" not in ops["Embed"][0]
    assert ops["Tag"][0]["dagster-ray/config"]["num_gpus"] == 1
    assert ops["Tag"][1] == "gpu"


def test_actor_only_ray_options_are_said_at_load_and_bad_amounts_refused(caplog, monkeypatch):
    from dagster_graphbook.defs import definitions

    monkeypatch.setattr(definitions, "_SAID", set())  # said once per process: not yet here
    with caplog.at_level(logging.WARNING, logger="dagster_graphbook"):
        build_definitions([GraphbookWorkflow(_graph())])
    said = [r.getMessage() for r in caplog.records if "Ray option" in r.getMessage()]
    assert any("max_restarts of _Tag are Ray actor options, not applied" in m for m in said)

    class _Bad(Step):
        Ray_Options = {"num_gpus": "one"}

    g = Graph()
    g.step(_Bad).bind(g.step(_Numbers))
    g.name = "bad"
    with pytest.raises(WorkflowError, match="Ray option num_gpus must be a number >= 0, not 'one'"):
        build_definitions([GraphbookWorkflow(g)], strict=True)
