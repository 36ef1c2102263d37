"""The YAML component (`type: dagster_graphbook.GraphbookWorkflowComponent`) loaded the way Dagster
loads a defs folder, and this repository's own autoloaded code location."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.support.defs_folder import load_defs_folder
from tests.support.nightly import NIGHTLY_YAML
from tests.support.nodes import node_file
from tests.support.paths import REPO

# load_defs is what loads a defs package without a dg project (autoload in workspace.yaml does the
# same).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Function `load_defs` is deprecated:DeprecationWarning"
)


SAMPLE_YAML = """
    type: dagster_graphbook.GraphbookWorkflowComponent
    attributes:
      workflow: ../../workflows/sample.json
      custom_nodes: [../../custom_nodes/sample]
      name: sample_from_yaml
      cron_schedule: "*/30 * * * *"
      executor: in_process
      notes_dir: {notes}
"""


def test_component_builds_partitioned_job_schedule_sensor_and_lineage(tmp_path):
    defs = load_defs_folder(tmp_path, "gb_component_defs", {"nightly": NIGHTLY_YAML})
    job = defs.resolve_job_def("nightly_shapes")
    assert job.partitions_def.get_first_partition_key() == "2026-01-01"
    assert job.tags["owner"] == "ml"
    schedule = defs.resolve_schedule_def("nightly_shapes_nightly")
    assert schedule.cron_schedule == "0 3 * * *"
    sensor = defs.resolve_sensor_def("nightly_shapes_new_folder")
    assert (
        str(tmp_path / "gb_component_defs" / "nightly" / "incoming") in sensor.description
    )  # relative to the defs.yaml folder
    (tmp_path / "gb_component_defs" / "nightly" / "incoming" / "2026-02-01").mkdir(parents=True)
    with dg.instance_for_test() as instance:
        tick = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert [r.partition_key for r in tick.run_requests] == ["2026-02-01"]
    assert [e.asset_key for e in tick.asset_events] == [
        dg.AssetKey(["nightly_shapes", "incoming"])
    ]  # sensor_asset

    graph = defs.resolve_asset_graph()
    source = dg.AssetKey(["nightly_shapes", "IncomingImages"])
    incoming = dg.AssetKey(["nightly_shapes", "incoming"])
    assert incoming in graph.get(source).parent_keys
    assert not graph.get(incoming).is_materializable  # external: made outside Dagster
    classify = defs.resolve_assets_def(dg.AssetKey(["nightly_shapes", "ClassifyShapes"]))
    assert classify.op.tags["team"] == "vision"
    assert graph.get(dg.AssetKey(["nightly_shapes", "SaveResized"])).parent_keys == {
        dg.AssetKey(["nightly_shapes", "ReviewSplit", "confident"])
    }


def test_component_paths_resolve_from_its_folder_and_the_job_runs(tmp_path):
    """Relative paths in defs.yaml resolve from its folder; the job runs (in process) and stores
    notes where asked."""
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "sample.json").write_text(
        (REPO / "workflows" / "sample.json").read_text()
    )
    (tmp_path / "custom_nodes").mkdir()
    (tmp_path / "custom_nodes" / "sample").symlink_to(REPO / "custom_nodes" / "sample")
    notes = tmp_path / "notes"
    defs = load_defs_folder(tmp_path, "gb_sample_defs", {"sample": SAMPLE_YAML.format(notes=notes)})
    assert defs.resolve_schedule_def("sample_from_yaml_schedule").cron_schedule == "*/30 * * * *"
    job = defs.resolve_job_def("sample_from_yaml")
    assert job.executor_def.name == "in_process"
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(
            instance=instance,
            run_config={
                "ops": {"sample_from_yaml__GenerateNumbers": {"config": {"amount": 20, "seed": 1}}}
            },
        )
    assert result.success
    stored = sorted(p.relative_to(notes).as_posix() for p in notes.rglob("*.pkl"))
    assert (
        f"sample_from_yaml/GenerateNumbers/{result.run_id}.pkl" in stored
        and f"sample_from_yaml/Split/A/{result.run_id}.pkl" in stored
    )


def test_component_with_a_missing_workflow_names_the_file_and_spares_the_others(tmp_path):
    """One broken workflow must not take down the code location: the good component still loads;
    the broken one is a job whose description (what the Jobs page shows) names the file."""
    bad = NIGHTLY_YAML.replace(f"{REPO}/workflows/nightly_shapes.json", "no_such_workflow.json")
    defs = load_defs_folder(tmp_path, "gb_bad_defs", {"bad": bad, "good": NIGHTLY_YAML})
    assert defs.resolve_job_def("nightly_shapes") is not None
    broken = defs.resolve_job_def("no_such_workflow")
    assert "FAILED TO LOAD" in broken.description and "no_such_workflow.json" in broken.description


def test_component_type_is_registered_for_dagster_tooling():
    modules = {
        ep.value for ep in importlib.metadata.entry_points(group="dagster_dg_cli.registry_modules")
    }
    assert "dagster_graphbook" in modules
    import dagster_graphbook

    assert issubclass(dagster_graphbook.GraphbookWorkflowComponent, dg.Component)


def test_repository_code_location_has_every_workflow_without_importing_torch():
    """What workspace.yaml loads (autoload of definitions/): the Python examples and the YAML
    nightly demo."""
    code = (
        "import importlib, sys, warnings; warnings.simplefilter('ignore');"
        "from dagster.components import load_defs;"
        "defs = load_defs(importlib.import_module('definitions'));"
        "print(sorted(j.name for j in defs.jobs), [s.name for s in defs.schedules], "
        "[s.name for s in defs.sensors], 'torch' in sys.modules)"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "['nightly_shapes', 'sample', 'sample_graph', 'simple_class', "
        "'simple_functional', 'word_split'] "
        "['nightly_shapes_nightly'] ['nightly_shapes_new_folder'] False"
    )


def _workflow_yaml(workflow: Path, nodes: Path) -> str:
    return (
        "type: dagster_graphbook.GraphbookWorkflowComponent\n"
        f"attributes:\n  workflow: {workflow}\n  custom_nodes: [{nodes}]\n"
    )


def test_component_whose_node_file_exits_at_import_names_the_file(tmp_path):
    """A node file calling ``sys.exit(0)`` at import ended the code server's load silently; the
    component's workflow is a job that names the file, and the location still loads."""
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    shutil.copyfile(node_file("component_count"), (nodes / "count.py"))
    (nodes / "quits.py").write_text("import sys\n\nsys.exit(0)\n")
    wf = tmp_path / "counting.json"
    wf.write_text(
        '{"nodes": [{"id": "1", "type": "step", "data": {"name": "Quits"}}], "edges": []}'
    )
    ok = tmp_path / "fine.json"
    ok.write_text(
        '{"nodes": [{"id": "1", "type": "step", "data": {"name": "Count"}}], "edges": []}'
    )
    defs = load_defs_folder(
        tmp_path,
        "gb_exit_defs",
        {"quits": _workflow_yaml(wf, nodes), "fine": _workflow_yaml(ok, nodes)},
    )
    assert defs.resolve_job_def("fine") is not None
    broken = defs.resolve_job_def("counting").description
    assert broken.startswith("FAILED TO LOAD"), broken
    assert f"{nodes / 'quits.py'}, line 3 failed to import" in broken, broken
    assert "called sys.exit(0)" in broken, broken


def test_two_components_of_one_workflow_name_are_refused_naming_both_files(tmp_path):
    """Two components whose workflows are ``MyFlow.json`` and ``sub/my_flow.json`` (both named
    ``my_flow``): Dagster said only ``Duplicate asset key: AssetKey(['my_flow', 'Count'])``. The
    error names both files and the ``name:`` attribute; with a name each, both load."""
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    shutil.copyfile(node_file("component_count"), (nodes / "count.py"))
    text = '{"nodes": [{"id": "1", "type": "step", "data": {"name": "Count"}}], "edges": []}'
    first, second = tmp_path / "MyFlow.json", tmp_path / "sub" / "my_flow.json"
    second.parent.mkdir()
    first.write_text(text)
    second.write_text(text)
    folders = {"a": _workflow_yaml(first, nodes), "b": _workflow_yaml(second, nodes)}
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    with pytest.raises(Exception) as info:
        load_defs_folder(tmp_path / "one", "gb_dup_defs", folders)
    chain, error = [], info.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__
    message = "\n".join(chain)
    assert f"workflows {first} and {second} both define job 'my_flow'" in message, message
    assert "`name:` in the attributes of its component's defs.yaml" in message, message
    assert "Duplicate asset key" not in message, message
    proc = subprocess.run(  # `materialize` says it in one line
        [sys.executable, "-m", "dagster_graphbook.cli", "materialize", "my_flow", "--module",
         "gb_dup_defs", "--no-progress", "--dagster-home", str(tmp_path / "home")],
        cwd=tmp_path / "one", capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"workflows {first} and {second} both define job 'my_flow'" in proc.stderr
    folders["b"] += "  name: my_flow_2\n"
    defs = load_defs_folder(tmp_path / "two", "gb_dup_named_defs", folders)
    assert defs.resolve_job_def("my_flow") and defs.resolve_job_def("my_flow_2")


def test_component_runs_on_a_named_executor_with_runtime_defaults_and_keeps_its_group(tmp_path):
    """docs/deploying.md's defs.yaml, as written: production in the README's layout, with
    ``executor: MODULE:ATTR`` and its ``executor_config`` (Ray's head), ``runtime:`` defaults
    every run starts from, and the sharded step's asset in the workflow's group like the others
    (it fell into ``default``)."""
    from tests.e2e.test_documented_examples import doc_section

    files, _ = doc_section("deploying.md", "## A production deployment")
    for folder in ("workflows", "custom_nodes"):  # where ../../ leads from the defs folder
        (tmp_path / folder).symlink_to(REPO / folder)
    defs = load_defs_folder(tmp_path, "gb_production_defs", {"nightly": files["defs.yaml"]})
    job = defs.resolve_job_def("nightly_shapes")
    assert job.executor_def.name == "ray"
    resolved = job.executor_def.config_schema.resolve_config({})  # a configured definition's
    assert resolved.value["config"]["ray"]["address"] == "http://ray-head:8265"
    config = dg.validate_run_config(job, {})
    ops = config["ops"]
    assert ops["nightly_shapes__ReviewSplit"]["config"]["runtime"]["on_item_error"] == "skip"
    sharded = job.graph.node_named("nightly_shapes__ClassifyShapes").definition
    classify = sharded.config_mapping.config_schema.config_type.fields["runtime"].default_value
    assert (classify["on_item_error"], classify["max_skipped_fraction"]) == ("skip", 0.05)
    assert classify["shards"] == 4  # the sharded step's defaults stay
    groups = {
        key.to_user_string(): group
        for assets in defs.assets or ()
        for key, group in assets.group_names_by_key.items()
    }
    assert set(groups.values()) == {"nightly_shapes"}, groups


@pytest.mark.parametrize(
    "attributes, said",
    [
        ("executor: not_a_module:thing", "executor must be 'in_process', 'multiprocess' or"),
        ("executor: threads", "executor must be one of in_process, multiprocess or MODULE:ATTR"),
        ("executor_config: {ray: {}}", "executor_config needs executor: MODULE:ATTR"),
        ("runtime: {on_item_error: never}", "runtime of step IncomingImages: on_item_error"),
    ],
)
def test_component_refuses_an_executor_or_runtime_it_cannot_use(tmp_path, attributes, said):
    """A wrong executor or runtime in defs.yaml fails the strict load naming the problem."""
    from dagster_graphbook import WorkflowError

    yaml = NIGHTLY_YAML + f"      strict: true\n      {attributes}\n"
    with pytest.raises(Exception) as caught:
        load_defs_folder(tmp_path, "gb_bad_defs", {"nightly": yaml})
    error: BaseException = caught.value
    while not isinstance(error, WorkflowError) and error.__cause__ is not None:
        error = error.__cause__
    assert said in str(error), str(caught.value)
