"""Run-isolated, versioned notes: real runs against a real instance.

Two runs of one partition run at once in two processes; a barrier step holds both until both have
stored their source's notes, so with one shared file per partition one run would read the other's.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow


def _workflow(folder: Path) -> Path:
    nodes = [
        step_node("0", "Emit", {"tag": "a", "count": 3}, source=True),
        step_node("1", "Barrier", {"folder": "", "parties": 1, "tag": "a"}),
        step_node("2", "Join"),
    ]
    edges = [edge("0", "out", "1"), edge("0", "out", "2"), edge("1", "out", "2")]
    return write_workflow(folder, "iso", nodes, edges)


def _code_location(tmp_path: Path, notes: Path) -> str:
    nodes = copy_nodes(tmp_path / "nodes", "iso_nodes.py", "notes_integrity")
    wf = _workflow(tmp_path)
    module = tmp_path / "iso_location.py"
    module.write_text(
        textwrap.dedent(f"""
        from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions
        defs = build_definitions([GraphbookWorkflow({str(wf)!r}, custom_nodes=[{str(nodes)!r}],
                                                    partitions_def=daily_partitions("2026-01-01"),
                                                    executor="in_process")],
                                 notes_dir={str(notes)!r})
    """)
    )
    return "iso_location"


RUNNER = """
import json, sys
from dagster_graphbook.runner.run import run_job
tag, barrier, home = sys.argv[1], sys.argv[2], sys.argv[3]
params = {"Emit.tag": tag, "Emit.count": 3 if tag == "a" else 5, "Barrier.folder": barrier,
          "Barrier.parties": 2, "Barrier.tag": tag}
run = run_job("iso", params, module="iso_location", partition_key="2026-02-01", dagster_home=home)
print(json.dumps({"run_id": run.run_id, "success": run.success, "failure": run.failure,
                  "tags": [n["tag"] for n in run.notes["Join"]["out"]]}))
"""


def _warnings(instance: dg.DagsterInstance, run_id: str) -> str:
    records = instance.all_logs(run_id)
    return "\n".join(r.user_message for r in records if r.level >= 30)


def test_two_concurrent_runs_of_one_partition_see_only_their_own_notes(tmp_path, dagster_home):
    notes = tmp_path / "notes"
    _code_location(tmp_path, notes)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    barrier = tmp_path / "barrier"
    procs = {
        tag: subprocess.Popen(
            [sys.executable, "-c", RUNNER, tag, str(barrier), dagster_home],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    }
    results = {}
    for tag, proc in procs.items():
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        results[tag] = json.loads(out.strip().splitlines()[-1])
    assert len(os.listdir(barrier)) == 2  # both runs really were inside the barrier at once
    for res in results.values():
        assert res["success"], res["failure"]
    # Join reads Emit twice (directly and through Barrier): each run sees only its own 3 or 5 notes
    assert results["a"]["tags"] == ["a"] * 6
    assert results["b"]["tags"] == ["b"] * 10
    # each materialization recorded its own immutable version, and both versions are stored
    folder = notes / "iso" / "Emit" / "2026-02-01"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{r['run_id']}.pkl" for r in results.values()
    )
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for res in results.values():
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(
                    asset_key=dg.AssetKey(["iso", "Emit"]), asset_partitions=["2026-02-01"]
                ),
                limit=10,
            ).records
            by_run = {r.run_id: r.asset_materialization.metadata for r in records}
            assert by_run[res["run_id"]]["dagster/uri"].value == str(
                folder / f"{res['run_id']}.pkl"
            )
        # the runs overlapped: at least one of them was warned, naming the other
        ids = {tag: res["run_id"] for tag, res in results.items()}
        warned = [
            tag
            for tag, other in (("a", "b"), ("b", "a"))
            if ids[other] in _warnings(instance, ids[tag])
        ]
        assert warned, "neither run was warned about the other"


def test_a_step_alone_reads_the_version_its_parents_latest_materialization_recorded(
    tmp_path, dagster_home
):
    """Re-materializing Join alone reads Emit's recorded version, not a newer unrecorded file."""
    from dagster_graphbook.runner.run import run_job

    notes = tmp_path / "notes"
    module = _code_location(tmp_path, notes)
    sys.path.insert(0, str(tmp_path))
    try:
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            first = run_job(
                "iso",
                {"Emit.tag": "first"},
                module=module,
                partition_key="2026-02-02",
                instance=instance,
            )
            second = run_job(
                "iso",
                {"Emit.tag": "second"},
                module=module,
                partition_key="2026-02-02",
                instance=instance,
            )
            assert first.success and second.success
            # a stray file under Emit's folder that no materialization recorded is never read
            folder = notes / "iso" / "Emit" / "2026-02-02"
            with open(folder / "zzzz-stray.pkl", "wb") as f:
                pickle.dump([{"tag": "stray", "i": 0}], f)
            os.utime(folder / "zzzz-stray.pkl", (time.time() + 60, time.time() + 60))
            defs = sys.modules[module].defs
            job = defs.resolve_implicit_global_asset_job_def()
            result = job.get_subset(
                asset_selection={dg.AssetKey(["iso", "Join"])}
            ).execute_in_process(
                instance=instance, partition_key="2026-02-02", raise_on_error=False
            )
            assert result.success
            joined = result.output_for_node("iso__Join", "out")
            assert [n["tag"] for n in joined] == ["second"] * 6
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(module, None)


def test_retention_keeps_the_newest_versions(tmp_path, dagster_home):
    from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions

    nodes = copy_nodes(tmp_path / "nodes", "iso_nodes.py", "notes_integrity")
    wf = _workflow(tmp_path)
    notes = tmp_path / "notes"
    defs = build_definitions(
        [
            GraphbookWorkflow(
                wf,
                custom_nodes=[nodes],
                partitions_def=daily_partitions("2026-01-01"),
                notes_keep=2,
            )
        ],
        notes_dir=str(notes),
    )
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        run_ids = []
        for tag in ("r1", "r2", "r3"):
            config = {"ops": {"iso__Emit": {"config": {"tag": tag}}}}
            result = defs.resolve_job_def("iso").execute_in_process(
                instance=instance, partition_key="2026-02-03", run_config=config
            )
            assert result.success
            run_ids.append(result.run_id)
    folder = notes / "iso" / "Emit" / "2026-02-03"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{r}.pkl" for r in run_ids[1:])


def test_notes_location_cannot_be_set_from_run_config(tmp_path, dagster_home):
    """13.1: ``resources.graphbook_notes.config.base_dir`` (a prepared folder) is refused."""
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    nodes = copy_nodes(tmp_path / "nodes", "iso_nodes.py", "notes_integrity")
    wf = _workflow(tmp_path)
    defs = build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes])], notes_dir=str(tmp_path / "notes")
    )
    evil = tmp_path / "evil"
    config = {"resources": {"graphbook_notes": {"config": {"base_dir": str(evil)}}}}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        with pytest.raises(dg.DagsterInvalidConfigError, match="graphbook_notes"):
            defs.resolve_job_def("iso").execute_in_process(instance=instance, run_config=config)
    assert not evil.exists()


def test_two_components_and_python_with_their_own_notes_dirs_load_into_one_location(
    tmp_path, dagster_home
):
    """13.7: workflows with the same or other notes_dirs, from YAML and Python, in one location."""
    from dagster_graphbook import GraphbookWorkflow, GraphbookWorkflowComponent, build_definitions

    nodes = copy_nodes(tmp_path / "nodes", "iso_nodes.py", "notes_integrity")
    wf = _workflow(tmp_path)
    shared, other = tmp_path / "shared_notes", tmp_path / "other_notes"
    parts = []
    for name, notes_dir in (("yaml_one", shared), ("yaml_two", shared), ("yaml_three", other)):
        component = GraphbookWorkflowComponent(
            workflow=str(wf), custom_nodes=[str(nodes)], name=name, notes_dir=str(notes_dir)
        )
        parts.append(build_definitions([component.workflow_spec(tmp_path)]))
    parts.append(
        build_definitions(
            [GraphbookWorkflow(wf, custom_nodes=[nodes], name="py_one")], notes_dir=str(shared)
        )
    )
    defs = dg.Definitions.merge(*parts)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for name in ("yaml_one", "yaml_three", "py_one"):
            result = defs.resolve_job_def(name).execute_in_process(instance=instance)
            assert result.success
            where = other if name == "yaml_three" else shared
            assert (where / name / "Join" / f"{result.run_id}.pkl").exists()


# --- Re-execution reads its parent's notes or says why not; damaged notes are named (20.3, 20.4)


RELINEAGE_DEFS = """
from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions

defs = build_definitions(
    [GraphbookWorkflow({wf!r}, custom_nodes=[{nodes!r}],
                       partitions_def=daily_partitions("2026-01-01"), notes_keep=3)],
    notes_dir={notes!r},
)


def job():
    return defs.resolve_job_def("relin")
"""


def _relineage(tmp_path: Path):
    """A partitioned Emit -> Check workflow in a module of its own (re-execution from failure
    needs a reconstructable job): (reconstructable job, marker file, seen file, notes dir)."""
    nodes = copy_nodes(tmp_path / "nodes", "relin_nodes.py", "notes_relineage")
    marker, seen = tmp_path / "marker", tmp_path / "seen.txt"
    wf = write_workflow(
        tmp_path,
        "relin",
        [
            step_node("0", "Emit", {"tag": "a"}, source=True),
            step_node("1", "Check", {"marker": str(marker), "seen": str(seen)}),
        ],
        [edge("0", "out", "1")],
    )
    notes = tmp_path / "notes"
    module = f"relin_defs_{tmp_path.name}"
    (tmp_path / f"{module}.py").write_text(
        RELINEAGE_DEFS.format(wf=str(wf), nodes=str(nodes), notes=str(notes))
    )
    sys.path.insert(0, str(tmp_path))
    recon = dg.build_reconstructable_job(
        module, "job", reconstructor_working_directory=str(tmp_path)
    )
    return recon, marker, seen, notes


def _run_day(recon, instance, tag: str) -> dg.JobExecutionResult:
    config = {"ops": {"relin__Emit": {"config": {"tag": tag}}}}
    with dg.execute_job(
        recon, instance, run_config=config, tags={"dagster/partition": "2026-02-10"}
    ) as result:
        return result


@pytest.mark.parametrize("later_runs", [1, 3])
def test_reexecution_reads_its_parents_notes_or_fails_naming_the_pruned_version(
    tmp_path, dagster_home, later_runs
):
    """Run P fails at step 2; later runs of the partition come; P is re-executed from failure.
    With P's step-1 version kept, the re-execution reads P's notes (never the newest run's); once
    ``notes_keep`` (3) pruned it, it used to succeed silently on the newest run's notes, and now
    fails naming the run, the asset, the partition, the pruned file and what to do."""
    recon, marker, seen, notes = _relineage(tmp_path)
    try:
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            marker.write_text("fail")
            parent = _run_day(recon, instance, "P")
            assert not parent.success
            marker.unlink()
            for k in range(later_runs):
                assert _run_day(recon, instance, f"later{k}").success
            seen.write_text("")
            options = dg.ReexecutionOptions.from_failure(parent.run_id, instance)
            day = {"dagster/partition": "2026-02-10"}  # the UI's re-execution keeps the tag
            with dg.execute_job(recon, instance, tags=day, reexecution_options=options) as result:
                success, run_id = result.success, result.run_id
            failures = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
            pruned = notes / "relin" / "Emit" / "2026-02-10" / f"{parent.run_id}.pkl"
            if later_runs == 1:
                assert success, failures
                assert seen.read_text().split() == ["P"] * 3
                return
            assert not success and not pruned.exists()
            assert seen.read_text() == "", "the re-execution read another run's notes"
            (failure,) = failures
            message = failure.dagster_event.step_failure_data.user_failure_data.description
            for part in (parent.run_id, "relin/Emit", "2026-02-10", str(pruned), "notes_keep"):
                assert part in message, message
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize("damage", ["garbage", "half", "empty"])
def test_damaged_stored_notes_fail_naming_asset_partition_run_and_file(
    tmp_path, dagster_home, damage
):
    """A stored notes file overwritten with garbage, cut in half or emptied failed its child with
    a bare ``UnpicklingError``/``EOFError`` naming nothing."""
    recon, _, seen, notes = _relineage(tmp_path)
    try:
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            first = _run_day(recon, instance, "P")
            assert first.success
            stored = notes / "relin" / "Emit" / "2026-02-10" / f"{first.run_id}.pkl"
            data = stored.read_bytes()
            stored.write_bytes(
                {"garbage": b"not a pickle at all", "half": data[: len(data) // 2], "empty": b""}[
                    damage
                ]
            )
            job = recon.get_definition()
            result = job.get_subset(
                asset_selection={dg.AssetKey(["relin", "Check"])}
            ).execute_in_process(
                instance=instance, partition_key="2026-02-10", raise_on_error=False
            )
            assert not result.success
            (failure,) = [e for e in result.all_events if e.is_step_failure]
            data = failure.step_failure_data.user_failure_data
            message = data.description
            for part in (first.run_id, "relin/Emit", "2026-02-10", str(stored), "materialize"):
                assert part in message, message
            assert data.metadata["file"].value == str(stored)
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize("later_runs", [1, 3])
def test_reexecution_reads_what_its_parent_read_from_an_older_run(
    tmp_path, dagster_home, later_runs
):
    """Run A materializes the partition; run P materializes only Check, reading A's Emit notes,
    and fails; run B (and more) materialize the partition again; P is re-executed from failure.
    P's lineage never materialized Emit, so the re-execution fell back to the newest version and
    silently checked B's (or the newest run's) notes instead of the A notes P read. It must read
    A's version, or (once retention pruned it) fail naming it."""
    recon, marker, seen, notes = _relineage(tmp_path)
    day = {"dagster/partition": "2026-02-10"}
    try:
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            older = _run_day(recon, instance, "A")
            assert older.success
            marker.write_text("fail")
            check_only = [dg.AssetKey(["relin", "Check"])]
            with dg.execute_job(recon, instance, tags=day, asset_selection=check_only) as parent:
                assert not parent.success
            marker.unlink()
            for k in range(later_runs):
                assert _run_day(recon, instance, f"later{k}").success
            seen.write_text("")
            options = dg.ReexecutionOptions.from_failure(parent.run_id, instance)
            with dg.execute_job(recon, instance, tags=day, reexecution_options=options) as result:
                success, run_id = result.success, result.run_id
            read = seen.read_text().split()
            assert read in ([], ["A"] * 3), f"the re-execution read another run's notes: {read}"
            stored = notes / "relin" / "Emit" / "2026-02-10" / f"{older.run_id}.pkl"
            if stored.exists():
                assert success and read == ["A"] * 3
            else:
                assert not success
                (failure,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
                message = failure.dagster_event.step_failure_data.user_failure_data.description
                assert older.run_id in message and str(stored) in message, message
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize("command", ["run", "materialize"])
def test_damaged_notes_met_loading_a_runs_results_are_one_line_in_the_cli(
    tmp_path, dagster_home, command
):
    """The run's own stored notes damaged before the CLI reads its results back: the message
    names asset, run and file, but the CLI printed it under a Python traceback."""
    nodes = copy_nodes(tmp_path / "nodes", "damaging_nodes.py", "notes_damaging")
    notes = tmp_path / "notes" if command == "materialize" else Path(dagster_home) / "storage"
    pattern = str(notes / "**" / "dmg" / "Emit" / "**" / "*.pkl")
    wf = write_workflow(
        tmp_path,
        "dmg",
        [step_node("0", "Emit", {}, source=True), step_node("1", "Damage", {"pattern": pattern})],
        [edge("0", "out", "1")],
    )
    (tmp_path / "dmg_location.py").write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(wf)!r}, custom_nodes=[{str(nodes)!r}])],"
        f" notes_dir={str(tmp_path / 'notes')!r})\n"
    )
    cli = [
        sys.executable,
        "-m",
        "dagster_graphbook.cli",
        command,
        "--dagster-home",
        dagster_home,
    ]
    if command == "run":
        cli += [str(wf), "--custom-nodes", str(nodes)]
    else:
        cli += ["dmg", "--module", "dmg_location"]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [*cli, "--no-progress"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "cannot be read" in out and "dmg/Emit" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
