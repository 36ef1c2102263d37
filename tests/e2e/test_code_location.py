"""The code location as Dagster loads it: workspace.yaml, a real webserver, launches through
GraphQL."""

from __future__ import annotations

import dagster as dg
import pytest

pytestmark = pytest.mark.ui


def _materializations(home, run_id: str) -> dict:
    """``{asset key: notes count}`` for every asset the run materialized, read from the instance's
    event log."""
    instance = dg.DagsterInstance.from_config(str(home))
    counts = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = record.asset_materialization
        counts[m.asset_key.to_user_string()] = m.metadata["dagster/row_count"].value
    return counts


def test_webserver_serves_server_info(webserver):
    print(f"webserver ready (GET /server_info) {webserver.ready_s:.1f} s after start")
    import requests

    info = requests.get(f"{webserver.url}/server_info", timeout=10).json()
    assert info["dagster_webserver_version"] == dg.__version__


def test_workspace_lists_every_workflow_as_a_job(webserver):
    data = webserver.graphql(
        "{ workspaceOrError { ... on Workspace { locationEntries { name "
        "locationOrLoadError { __typename ... on RepositoryLocation { repositories { "
        "jobs { name } assetNodes { assetKey { path } } } } } } } } }"
    )
    entry = data["workspaceOrError"]["locationEntries"][0]
    assert entry["name"] == "graphbook"
    repo = entry["locationOrLoadError"]["repositories"][0]
    jobs = {j["name"] for j in repo["jobs"]}
    assert {
        "nightly_shapes",
        "sample",
        "sample_graph",
        "simple_functional",
        "simple_class",
        "word_split",
    } <= jobs
    keys = {"/".join(a["assetKey"]["path"]) for a in repo["assetNodes"]}
    assert {
        "sample/GenerateNumbers",
        "sample/Split/A",
        "sample/Split/B",
        "word_split/SplitWords/OutputFiles",
    } <= keys


def test_launch_from_graphql_with_edited_parameters_succeeds(webserver):
    """What the launchpad does: launchRun with edited step parameters (graphbook_executor, in
    process)."""
    run_config = {
        "ops": {
            "sample__GenerateNumbers": {"config": {"amount": 12, "seed": 3}},
            "sample__Transform": {"config": {"scale": 0.0, "shift": 20.0}},
        }
    }
    run_id = webserver.launch("sample", run_config)
    webserver.expect_success(run_id)
    counts = _materializations(webserver.home, run_id)
    assert counts["sample/GenerateNumbers"] == 12
    # scale 0, shift 20: every mean is 20 > 10, so Split sends all 12 notes to A
    assert counts["sample/Split/A"] == 12 and counts["sample/Split/B"] == 0


# ---------------------------------------------------------------------------------------------
# The nightly shapes demo (daily partitioned) launched as the UI does


DEMO = "nightly_shapes"


def _demo_config(inputs: dict, output_dir: str, *, threshold: float, size: int) -> dict:
    """Launchpad config for the demo with its paths moved to the test's folder and two parameters
    edited."""
    return {
        "ops": {
            f"{DEMO}__IncomingImages": {
                "config": {"folder": f"{inputs['incoming']}/{{partition_key}}"}
            },
            f"{DEMO}__ReviewSplit": {"config": {"threshold": threshold}},
            f"{DEMO}__SaveResized": {"config": {"output_dir": output_dir, "size": size}},
        },
        "resources": {
            f"{DEMO}__ShapesModel": {"config": {"checkpoint": str(inputs["checkpoint"])}}
        },
    }


def _written(folder) -> dict:
    """``{"label/name.png": (width, height)}`` of the images under ``folder``."""
    from PIL import Image

    out = {}
    for path in sorted(folder.rglob("*.png")):
        with Image.open(path) as image:
            out[str(path.relative_to(folder))] = image.size
    return out


def test_demo_job_is_partitioned_with_schedule_sensor_and_lineage(webserver, nightly_inputs):
    query = """query($s: PipelineSelector!) { pipelineOrError(params: $s) { ... on Pipeline {
      isAssetJob partitionKeysOrError { ... on PartitionKeys { partitionKeys } }
      schedules { name cronSchedule } sensors { name } } } }"""
    job = webserver.graphql(
        query,
        {
            "s": {
                "repositoryLocationName": "graphbook",
                "repositoryName": "__repository__",
                "pipelineName": DEMO,
            }
        },
    )["pipelineOrError"]
    assert job["isAssetJob"]
    keys = job["partitionKeysOrError"]["partitionKeys"]
    assert keys[0] == "2025-01-01" and nightly_inputs["day"] in keys
    assert [s["cronSchedule"] for s in job["schedules"]] == ["0 2 * * *"]
    assert len(job["sensors"]) == 1
    nodes = webserver.graphql(
        '{ assetNodes(group: {groupName: "nightly_shapes", repositoryName: '
        '"__repository__", repositoryLocationName: "graphbook"}) { assetKey { path } '
        "dependencyKeys { path } isMaterializable } }"
    )["assetNodes"]
    deps = {
        "/".join(n["assetKey"]["path"]): sorted("/".join(d["path"]) for d in n["dependencyKeys"])
        for n in nodes
    }
    assert deps[f"{DEMO}/IncomingImages"] == [
        f"{DEMO}/incoming"
    ]  # the incoming folder, an external asset
    assert deps[f"{DEMO}/ClassifyShapes"] == [f"{DEMO}/IncomingImages"]
    assert deps[f"{DEMO}/SaveResized"] == [f"{DEMO}/ReviewSplit/confident"]
    assert not next(n for n in nodes if n["assetKey"]["path"] == [DEMO, "incoming"])[
        "isMaterializable"
    ]


@pytest.fixture(scope="module")
def demo_run(webserver, nightly_inputs):
    """One partition of the demo launched over GraphQL with edited parameters: threshold 0 (nothing
    to review) and 24-pixel copies (the default is 48, confidence threshold 0.9)."""
    day = nightly_inputs["day"]
    config = _demo_config(
        nightly_inputs,
        f"{nightly_inputs['root']}/outputs/{{partition_key}}",
        threshold=0.0,
        size=24,
    )
    run_id = webserver.launch(DEMO, config, tags={"dagster/partition": day})
    webserver.expect_success(run_id)
    return {"run_id": run_id, "day": day, "outputs": nightly_inputs["root"] / "outputs" / day}


def test_demo_partition_launched_with_edited_parameters(webserver, demo_run, nightly_inputs):
    counts = _materializations(webserver.home, demo_run["run_id"])
    n = nightly_inputs["count"]
    assert counts == {
        f"{DEMO}/IncomingImages": n,
        f"{DEMO}/ClassifyShapes": n,
        f"{DEMO}/ReviewSplit/confident": n,
        f"{DEMO}/ReviewSplit/review": 0,
        f"{DEMO}/SaveResized": n,
    }
    instance = dg.DagsterInstance.from_config(str(webserver.home))
    records = instance.all_logs(
        demo_run["run_id"], of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
    )
    assert {r.asset_materialization.partition for r in records} == {demo_run["day"]}
    # {partition_key} in output_dir became the day; every copy is 24 x 24, in a folder named for its
    # label
    written = _written(demo_run["outputs"])
    assert len(written) == n and set(written.values()) == {(24, 24)}
    assert {name.split("/")[0] for name in written} <= {"circle", "square", "triangle", "cross"}


def test_rematerialize_one_downstream_asset_from_stored_parents(
    webserver, demo_run, nightly_inputs
):
    """The UI's "Materialize selected" on SaveResized for the same day: only that op runs, on the
    notes its parents stored in the first run (same images, same predicted labels), with a new size
    and folder."""
    day = demo_run["day"]
    again = nightly_inputs["root"] / "again"
    config = {
        "ops": {
            f"{DEMO}__SaveResized": {
                "config": {"output_dir": f"{again}/{{partition_key}}", "size": 16}
            }
        }
    }
    run_id = webserver.launch(
        DEMO,
        config,
        tags={"dagster/partition": day},
        assetSelection=[{"path": [DEMO, "SaveResized"]}],
    )
    webserver.expect_success(run_id)

    run = webserver.graphql(
        "query($id: ID!) { runOrError(runId: $id) { ... on Run { stepKeysToExecute "
        "stepStats { stepKey status } } } }",
        {"id": run_id},
    )["runOrError"]
    assert run["stepKeysToExecute"] == [f"{DEMO}__SaveResized"]
    assert [(s["stepKey"], s["status"]) for s in run["stepStats"]] == [
        (f"{DEMO}__SaveResized", "SUCCESS")
    ]
    assert _materializations(webserver.home, run_id) == {
        f"{DEMO}/SaveResized": nightly_inputs["count"]
    }

    first = _written(demo_run["outputs"])
    second = _written(again / day)
    assert set(second) == set(first)  # the same files under the same predicted labels
    assert set(second.values()) == {(16, 16)}

    instance = dg.DagsterInstance.from_config(str(webserver.home))
    for key in (["ReviewSplit", "confident"], ["ClassifyShapes"], ["IncomingImages"]):
        event = instance.get_latest_materialization_event(dg.AssetKey([DEMO, *key]))
        assert event.run_id == demo_run["run_id"], key


def test_reload_code_location(webserver):
    data = webserver.graphql(
        'mutation { reloadRepositoryLocation(repositoryLocationName: "graphbook") { '
        "__typename ... on WorkspaceLocationEntry { locationOrLoadError { __typename "
        "} } } }"
    )
    result = data["reloadRepositoryLocation"]
    assert result["__typename"] == "WorkspaceLocationEntry"
    assert result["locationOrLoadError"]["__typename"] == "RepositoryLocation"


# ---------------------------------------------------------------------------------------------
# The executor of workflow jobs: one process unless the run asks for one per step


def _step_pids(home, run_id: str) -> dict:
    instance = dg.DagsterInstance.from_config(str(home))
    starts = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
    return {r.step_key: r.dagster_event.pid for r in starts}


def test_launchpad_runs_in_one_process_unless_the_run_picks_multiprocess(webserver):
    ops = {"ops": {"sample__GenerateNumbers": {"config": {"amount": 6}}}}
    one = webserver.launch("sample", ops)
    webserver.expect_success(one)
    pids = _step_pids(webserver.home, one)
    assert len(pids) == 5 and len(set(pids.values())) == 1  # every step in the run worker

    multiprocess = {"execution": {"config": {"multiprocess": {"max_concurrent": 2}}}}
    per_step = webserver.launch("sample", {**ops, **multiprocess})
    webserver.expect_success(per_step)
    pids = _step_pids(webserver.home, per_step)
    assert len(pids) == 5 and len(set(pids.values())) == 5  # one process per step
