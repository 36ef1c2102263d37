"""GPU requests from one setting: op tags that the Kubernetes, Ray and Dask executors read."""

from __future__ import annotations

import json

import pytest

from dagster_graphbook import GraphbookWorkflow, WorkflowError, build_definitions
from tests.conftest import REPO, _load_defs_folder

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
    tags = _op_tags(_load_defs_folder(tmp_path, "gpu_location", {"nightly": yaml}))
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
