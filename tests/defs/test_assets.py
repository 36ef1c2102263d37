"""Each workflow's job lists only its own resources in its run config schema (the Launchpad),
though every workflow of the code location shares one Definitions; both jobs still run."""

from __future__ import annotations

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow

SHARED = {"graphbook_notes", "io_manager"}  # every job's notes and default IO managers


@pytest.fixture
def two_workflows(tmp_path):
    """Two workflows, ``shift`` (resource Offset) and ``grow`` (resource Scale)."""
    nodes = copy_nodes(tmp_path / "nodes", "res_nodes.py", "asset_specs")
    paths = []
    for name, resource, value in (("shift", "Offset", {"offset": 10}), ("grow", "Scale", {})):
        paths.append(
            write_workflow(
                tmp_path,
                name,
                [
                    step_node("1", "Emit", source=True),
                    step_node("2", "Use"),
                    resource_node("3", resource, value),
                ],
                [edge("1", "out", "2"), edge("3", "resource", "2", "value")],
            )
        )
    defs = build_definitions(
        [GraphbookWorkflow(p, custom_nodes=[nodes]) for p in paths],
        notes_dir=str(tmp_path / "notes"),
        strict=True,
    )
    return defs, tmp_path / "location.py", paths, nodes


def _schema_resources(job: dg.JobDefinition) -> set:
    return set(job.run_config_schema.config_type.fields["resources"].config_type.fields)


def test_each_job_lists_only_its_own_resources_and_runs(two_workflows, dagster_home):
    defs, *_ = two_workflows
    # the Definitions hold both (the Catalog's materializations of any asset need them) ...
    assert {"shift__Offset", "grow__Scale"} <= set(defs.resources)
    shift, grow = defs.resolve_job_def("shift"), defs.resolve_job_def("grow")
    # ... but each job's Launchpad shows its own
    assert _schema_resources(shift) == {"shift__Offset", *SHARED}
    assert _schema_resources(grow) == {"grow__Scale", *SHARED}
    assert set(shift.resource_defs) == {"shift__Offset", *SHARED}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for job, resource, config, expected in (
            (shift, "shift__Offset", {"offset": 5}, [5, 6, 7]),
            (grow, "grow__Scale", {"factor": 3}, [3, 4, 5]),
        ):
            result = job.execute_in_process(
                run_config={"resources": {resource: {"config": config}}}, instance=instance
            )
            assert result.success
            notes = result.output_for_node(f"{job.name}__Use", "out")
            assert [n["value"] for n in notes] == expected
        # a job refuses the other workflow's resource in its config
        with pytest.raises(dg.DagsterInvalidConfigError, match="grow__Scale"):
            shift.execute_in_process(
                run_config={"resources": {"grow__Scale": {"config": {"factor": 3}}}},
                instance=instance,
            )


@pytest.mark.ui
def test_launchpad_lists_only_the_jobs_own_resources_through_graphql(two_workflows, dagster_home):
    """What the Launchpad reads from a real code server: each job's resources."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    _, location, paths, nodes = two_workflows
    specs = ", ".join(
        f"GraphbookWorkflow({str(p)!r}, custom_nodes=[{str(nodes)!r}])" for p in paths
    )
    location.write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([{specs}], strict=True)\n"
    )
    query = """{ repositoriesOrError { ... on RepositoryConnection { nodes {
      jobs { name modes { resources { name } } } } } } }"""
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        with define_out_of_process_context(str(location), "defs", instance) as context:
            data = execute_dagster_graphql(context, query).data
    jobs = {
        j["name"]: {r["name"] for r in j["modes"][0]["resources"]}
        for j in data["repositoriesOrError"]["nodes"][0]["jobs"]
    }
    assert jobs["shift"] == {"shift__Offset", *SHARED}
    assert jobs["grow"] == {"grow__Scale", *SHARED}


def test_a_users_io_manager_keeps_jobs_to_their_own_resources(two_workflows, tmp_path):
    """Dagster rebinds a job that keeps the default ``io_manager`` with every resource of the
    Definitions when they set one: ``extra_resources={"io_manager": ...}`` is resolved with
    each job, so it still lists only its own."""
    _, _, paths, nodes = two_workflows
    defs = build_definitions(
        [GraphbookWorkflow(p, custom_nodes=[nodes]) for p in paths],
        notes_dir=str(tmp_path / "notes"),
        extra_resources={"io_manager": dg.mem_io_manager},
        strict=True,
    )
    shift = defs.resolve_job_def("shift")
    assert _schema_resources(shift) == {"shift__Offset", *SHARED}
    assert shift.resource_defs["io_manager"] is dg.mem_io_manager
