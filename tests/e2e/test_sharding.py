"""Sharded batch steps end to end: real runs of tens of notes, each compared with the unsharded
run where a comparison says what is right.
"""

from __future__ import annotations

import os
import re

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, StepCheck, build_definitions, daily_partitions
from dagster_graphbook.model.workflow import WorkflowError
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

FAST = {"Parity.runtime.num_workers": 0, "Parity.runtime.device": "cpu"}


@pytest.fixture
def nodes(tmp_path):
    return copy_nodes(tmp_path / "nodes", "parities_nodes.py", "sharded_steps")


def _wf(tmp_path, *, n=30, two_sources=False, collect=False, parity="Parity", params=None):
    """Numbers(n) [+ Numbers(base 1000)] -> Parity [-> Collect fed by both pins]."""
    nodes_ = [step_node("0", "Numbers", {"n": n}, source=True)]
    edges = [edge("0", "out", "1")]
    if two_sources:
        nodes_.append(step_node("5", "Numbers", {"n": 7, "base": 1000}, source=True, label="B"))
        edges.append(edge("5", "out", "1"))
    nodes_.append(step_node("1", parity, params or {}, outputs=["even", "odd"], label="Parity"))
    if collect:
        nodes_.append(step_node("2", "Collect", {}))
        edges += [edge("1", "even", "2"), edge("1", "odd", "2")]
    return write_workflow(tmp_path, "parities", nodes_, edges)


def _i(notes):
    return [n["i"] for n in notes]


def _shard_steps(run):
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        keys = {e.step_key for e in instance.all_logs(run.run_id) if e.step_key}
    return sorted(k for k in keys if "shard[" in k)


def _materializations(home, run_id):
    """[(asset key, partition, metadata values)] of one run, in event order."""
    with dg.DagsterInstance.from_config(home) as instance:
        records = instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
        out = []
        for record in records:
            m = record.event_log_entry.dagster_event.event_specific_data.materialization
            meta = {k: v.value for k, v in m.metadata.items()}
            out.append((m.asset_key.to_user_string(), m.partition, meta))
    return out


# ---------------------------------------------------------------------------------------------
# Notes: order and content against the unsharded run


def test_two_input_edges_and_a_two_pin_child_keep_the_unsharded_order(tmp_path, nodes, run_wf):
    """Parity fed by two sources (Graphbook alternates parents), its two pins feeding one child
    (which takes them in Parity's emission order): the same notes in the same order."""
    wf = _wf(tmp_path, two_sources=True, collect=True)
    whole = run_wf(wf, [nodes], FAST)
    assert whole.success, whole.failure
    sharded = run_wf(wf, [nodes], FAST, shards={"Parity": 3})
    assert sharded.success, sharded.failure
    for pin in ("even", "odd"):
        assert sharded["Parity"][pin] == whole["Parity"][pin]
    assert _i(sharded["Collect"]["out"]) == _i(whole["Collect"]["out"])
    assert sharded["Collect"]["out"] == whole["Collect"]["out"]


@pytest.mark.parametrize(
    "n, setting, shard_steps",
    [
        (0, {"Parity": 3}, 1),  # no notes: one empty shard
        (2, {"Parity": 5}, 2),  # fewer notes than shards
        (10, {"Parity": {"shard_size": 4}}, 3),  # 4, 4, 2
        (10, {"Parity": 3}, 3),  # 4, 3, 3
    ],
)
def test_odd_sizes_give_the_unsharded_notes(tmp_path, nodes, run_wf, n, setting, shard_steps):
    wf = _wf(tmp_path, n=n, collect=True)
    whole = run_wf(wf, [nodes], FAST)
    sharded = run_wf(wf, [nodes], FAST, shards=setting)
    assert whole.success and sharded.success, sharded.failure
    assert len(_shard_steps(sharded)) == shard_steps
    assert sharded.notes == whole.notes
    rows = {
        k: m.get("dagster/row_count")
        for k, _, m in _materializations(sharded.dagster_home, sharded.run_id)
    }
    rows_whole = {
        k: m.get("dagster/row_count")
        for k, _, m in _materializations(whole.dagster_home, whole.run_id)
    }
    assert rows == rows_whole


# ---------------------------------------------------------------------------------------------
# Materializations and their metadata


def test_one_materialization_per_pin_from_the_commit_only(tmp_path, nodes, run_wf):
    wf = _wf(tmp_path, n=12)
    run = run_wf(wf, [nodes], FAST, shards={"Parity": 3})
    assert run.success, run.failure
    mats = _materializations(run.dagster_home, run.run_id)
    keys = [k for k, _, _ in mats if "Parity" in k]
    assert sorted(keys) == ["parities/Parity/even", "parities/Parity/odd"], keys
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        steps = {
            r.step_key
            for r in instance.all_logs(
                run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            )
        }
    assert all(s.endswith("__commit") for s in steps if "Parity" in s), steps


def _partitioned_defs(tmp_path, nodes, wf, **kw):
    spec = GraphbookWorkflow(
        wf, custom_nodes=[nodes], partitions_def=daily_partitions("2026-01-01"), **kw
    )
    return build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)


FAST_OPS = {"runtime": {"num_workers": 0, "device": "cpu"}}


def test_a_daily_partitioned_sharded_step(tmp_path, nodes, dagster_home):
    """One materialization per pin for the run's partition; the partition key fills the step's
    string parameters in every shard."""
    wf = _wf(tmp_path, n=12, params={"tag": "day-{partition_key}"})
    defs = _partitioned_defs(tmp_path, nodes, wf, shards={"Parity": 3})
    instance = dg.DagsterInstance.from_config(dagster_home)
    result = defs.resolve_job_def("parities").execute_in_process(
        run_config={"ops": {"parities__Parity": {"config": FAST_OPS}}},
        instance=instance,
        partition_key="2026-02-03",
        raise_on_error=False,
    )
    assert result.success, [str(e.event_specific_data) for e in result.all_events if e.is_failure]
    mats = _materializations(dagster_home, result.run_id)
    parity = [(k, p) for k, p, _ in mats if "Parity" in k]
    assert sorted(parity) == [
        ("parities/Parity/even", "2026-02-03"),
        ("parities/Parity/odd", "2026-02-03"),
    ]
    value = defs.load_asset_value(
        dg.AssetKey(["parities", "Parity", "even"]), instance=instance, partition_key="2026-02-03"
    )
    assert [n["tag"] for n in value] == ["day-2026-02-03"] * 6


def test_skipped_items_are_numbered_in_the_whole_step(tmp_path, nodes, run_wf):
    """Item 25 (note 25's first item) cannot be loaded, on_item_error skip: the errors table
    names note 25 (not note 5 of shard 3), the note carries graphbook_lost_items [0]; the same
    figures as unsharded."""
    wf = _wf(tmp_path, params={"bad": 25})
    params = {**FAST, "Parity.runtime.on_item_error": "skip"}
    whole = run_wf(wf, [nodes], params)
    sharded = run_wf(wf, [nodes], params, shards={"Parity": 3})
    assert whole.success and sharded.success, sharded.failure
    assert sharded.notes == whole.notes
    lost = [n for n in sharded["Parity"]["odd"] if n.get("graphbook_lost_items")]
    assert [(n["i"], n["graphbook_lost_items"]) for n in lost] == [(25, [0])]
    meta = {k: m for k, _, m in _materializations(sharded.dagster_home, sharded.run_id)}
    meta_whole = {k: m for k, _, m in _materializations(whole.dagster_home, whole.run_id)}
    odd, odd_whole = meta["parities/Parity/odd"], meta_whole["parities/Parity/odd"]
    assert odd["errors_skipped"] == odd_whole["errors_skipped"] == 1
    assert [r.data["note"] for r in odd["errors"].records] == [25]
    assert odd["notes_with_lost_items"] == odd_whole["notes_with_lost_items"] == 1
    for key in ("notes_in", "items", "correct", "items_seen"):
        assert odd[key] == odd_whole[key], key


@pytest.mark.parametrize("limit, fails", [(0.03, False), (0.01, True)])
def test_max_skipped_fraction_is_the_whole_steps(tmp_path, nodes, run_wf, limit, fails):
    """1 of 60 items lost (1.7%) overall, but 1 of 20 (5%) in its shard: the limit applies to
    the whole step, as unsharded."""
    wf = _wf(tmp_path, params={"bad": 25})
    params = {
        **FAST,
        "Parity.runtime.on_item_error": "skip",
        "Parity.runtime.max_skipped_fraction": limit,
    }
    whole = run_wf(wf, [nodes], params)
    sharded = run_wf(wf, [nodes], params, shards={"Parity": 3})
    assert whole.success == sharded.success == (not fails), sharded.failure


def test_a_step_check_on_a_sharded_step(tmp_path, nodes, dagster_home):
    wf = _wf(tmp_path, n=12)
    checks = [StepCheck(step="Parity", metric="correct", min=1000, severity="warn")]
    defs = _partitioned_defs(tmp_path, nodes, wf, shards={"Parity": 3}, checks=checks)
    instance = dg.DagsterInstance.from_config(dagster_home)
    result = defs.resolve_job_def("parities").execute_in_process(
        run_config={"ops": {"parities__Parity": {"config": FAST_OPS}}},
        instance=instance,
        partition_key="2026-02-03",
        raise_on_error=False,
    )
    assert result.success
    evaluations = [  # the step's check, once (the source has its own, source_has_notes)
        e for e in result.get_asset_check_evaluations() if e.check_name == checks[0].check_name
    ]
    assert len(evaluations) == 1, evaluations
    assert not evaluations[0].passed


# ---------------------------------------------------------------------------------------------
# Figures and the commit hook


def test_a_whole_number_constant_figure_is_named_or_kept_by_on_commit(tmp_path, nodes, run_wf):
    """Whole-number figures are summed as counts. ``num_classes: 2`` (a constant) is summed
    too, as nothing tells it from a count; when the shards differ in size and it is still the
    same in each, the figures_note names it (even shards say nothing: their counts are alike
    as well, the nightly demo's 4 x 10,000 images). A step whose on_commit returns it gets it."""
    wf = _wf(tmp_path, n=30)
    whole = run_wf(wf, [nodes], FAST)
    uneven = run_wf(wf, [nodes], FAST, shards={"Parity": 4})  # 8, 8, 7, 7 notes
    even = run_wf(wf, [nodes], FAST, shards={"Parity": 3})  # 10 each
    assert whole.success and uneven.success and even.success
    meta_whole = {k: m for k, _, m in _materializations(whole.dagster_home, whole.run_id)}
    assert meta_whole["parities/Parity/even"]["num_classes"] == 2
    meta = {k: m for k, _, m in _materializations(uneven.dagster_home, uneven.run_id)}
    parity = meta["parities/Parity/even"]
    assert parity["items_seen"] == meta_whole["parities/Parity/even"]["items_seen"]
    assert parity["num_classes"] == 8
    assert "different sizes: num_classes (a constant" in parity["figures_note"], parity
    meta = {k: m for k, _, m in _materializations(even.dagster_home, even.run_id)}
    assert "figures_note" not in meta["parities/Parity/even"]
    kept = run_wf(_wf(tmp_path, n=30, parity="Keeps"), [nodes], FAST, shards={"Parity": 4})
    assert kept.success, kept.failure
    meta = {k: m for k, _, m in _materializations(kept.dagster_home, kept.run_id)}
    assert meta["parities/Parity/even"]["num_classes"] == 2
    assert "figures_note" not in meta["parities/Parity/even"]


def test_on_commit_logs_as_the_step_and_a_static_one_needs_no_resources(tmp_path, nodes, run_wf):
    """``self.log`` in on_commit speaks for the step (it failed: 'Only steps running in a
    workflow can log'); a staticmethod hook builds no step, so the commit op requires no
    resource (the nightly demo's: no model loaded for the commit)."""
    import importlib.util

    from dagster_graphbook.execution.op.shards import commit_needs_step

    run = run_wf(_wf(tmp_path, n=12, parity="Logs"), [nodes], FAST, shards={"Parity": 3})
    assert run.success, run.failure
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        said = [r.user_message for r in instance.all_logs(run.run_id)]
    assert any("committing 3 shards" in m for m in said), said
    spec = importlib.util.spec_from_file_location(
        "parities_nodes_probe", nodes / "parities_nodes.py"
    )
    classes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(classes)
    assert commit_needs_step(classes.Logs) and not commit_needs_step(classes.Parity)
    from custom_nodes.nightly.nightly_nodes import ClassifyShapes

    assert not commit_needs_step(ClassifyShapes)


def test_an_on_commit_that_raises_fails_the_commit_naming_the_hook(tmp_path, nodes, run_wf):
    wf = _wf(tmp_path, n=12, parity="Boom")
    params = {"Parity.runtime.num_workers": 0, "Parity.runtime.device": "cpu"}
    run = run_wf(wf, [nodes], params, shards={"Parity": 3})
    assert not run.success
    assert "on_commit cannot merge these figures" in run.failure, run.failure
    assert "Parity" in run.failure


# ---------------------------------------------------------------------------------------------
# Re-execution from failure


def _marks(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    return marks


def _starts(marks):
    return sorted(
        p.name.rsplit("-", 1)[0] for p in marks.iterdir() if not p.name.startswith("failed")
    )


def _steps_run(home, run_id):
    with dg.DagsterInstance.from_config(home) as instance:
        return sorted(
            {r.step_key for r in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)}
        )


def test_from_failure_reruns_only_the_failed_shard(tmp_path, nodes, run_wf):
    """Shard 3 of 3 fails (no retries); run_workflow(from_failure=...) runs that shard, the
    commit and the child again, reads the other shards' results, and gives every note."""
    marks = _marks(tmp_path)
    wf = _wf(tmp_path, collect=True, params={"marks": str(marks), "fail_at": 25})
    whole = run_wf(wf, [nodes], {**FAST, "Parity.fail_at": -1})
    assert whole.success, whole.failure
    shards = {"Parity": 3}
    failed = run_wf(wf, [nodes], FAST, shards=shards)
    assert not failed.success
    resumed = run_wf(wf, [nodes], from_failure=failed.run_id, shards=shards)
    assert resumed.success, resumed.failure
    ran = _steps_run(resumed.dagster_home, resumed.run_id)
    assert [s.rsplit(".", 1)[-1] for s in ran] == [
        "parities__Collect",
        "parities__Parity__commit",
        "parities__Parity__shard[shard_2]",
    ], ran
    assert resumed.notes["Parity"] == whole.notes["Parity"]
    assert resumed.notes["Collect"] == whole.notes["Collect"]


def test_from_failure_after_a_killed_run_runs_the_shards_that_never_ran(
    tmp_path, nodes, run_wf, dagster_home
):
    """dagster-io/dagster#30248: the run's process is killed (kill -9) in shard 2 of 3, so
    shard 3 never started and has no event. Dagster's from-failure selects shard 2 and the
    commit only; the executor adds shard 3, so the resumed run commits the whole step (before,
    the commit's guard refused 'shards 2 of 3 never arrived', on every later resume too)."""
    import subprocess
    import sys
    import textwrap

    marks = _marks(tmp_path)
    wf = _wf(tmp_path, params={"marks": str(marks), "fail_at": 15, "interrupt": 2})
    script = textwrap.dedent(
        f"""
        from dagster_graphbook import run_workflow
        run_workflow({str(wf)!r}, custom_nodes=[{str(nodes)!r}], params={FAST!r},
                     dagster_home={dagster_home!r}, shards={{"Parity": 3}},
                     executor="in_process")  # the kill takes the run's own process
        """
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        (dead,) = instance.get_runs()
        ran = _steps_run(dagster_home, dead.run_id)
    assert [s for s in ran if "shard[" in s] == [
        "parities__Parity.parities__Parity__shard[shard_0]",
        "parities__Parity.parities__Parity__shard[shard_1]",
    ], ran  # shard 3 never started
    resumed = run_wf(wf, [nodes], from_failure=dead.run_id, shards={"Parity": 3})
    assert resumed.success, resumed.failure
    assert [s for s in _steps_run(dagster_home, resumed.run_id) if "shard[" in s] == [
        "parities__Parity.parities__Parity__shard[shard_1]",
        "parities__Parity.parities__Parity__shard[shard_2]",
    ]
    whole = run_wf(wf, [nodes], {**FAST, "Parity.marks": "", "Parity.fail_at": -1})
    assert resumed.notes["Parity"] == whole.notes["Parity"]


def test_from_failure_after_the_plan_op_failed_runs_every_shard(
    tmp_path, nodes, run_wf, monkeypatch
):
    """dagster-io/dagster#30248: a failure before the fan-out. The plan op fails once; resumed,
    every shard runs and the commit has them all."""
    from dagster_graphbook.execution.op import shards as shards_module

    real = shards_module.split
    calls = []

    def split_failing_once(notes, runtime):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the plan op's first attempt fails")
        return real(notes, runtime)

    monkeypatch.setattr(shards_module, "split", split_failing_once)
    wf = _wf(tmp_path, n=12)
    shards = {"Parity": 3}
    failed = run_wf(wf, [nodes], FAST, shards=shards)
    assert not failed.success
    resumed = run_wf(wf, [nodes], from_failure=failed.run_id, shards=shards)
    assert resumed.success, resumed.failure
    assert len(_shard_steps(resumed)) == 3
    assert len(resumed["Parity"]["even"]) + len(resumed["Parity"]["odd"]) == 12


def test_the_commit_alone_after_a_failed_shard_is_refused(tmp_path, nodes, run_wf):
    """Re-executing only the commit step while shard 2 of 3 failed: the guard refuses."""
    from dagster_graphbook.plan.translator import GraphbookTranslator
    from dagster_graphbook.runner.rebuild import workflow_recon as _workflow_recon

    marks = _marks(tmp_path)
    wf = _wf(tmp_path, n=12, params={"marks": str(marks), "fail_at": 5})
    shards = {"Parity": 3}
    failed = run_wf(wf, [nodes], FAST, shards=shards)
    assert not failed.success
    spec = GraphbookWorkflow(wf, custom_nodes=[str(nodes.resolve())], shards=shards)
    recon = _workflow_recon(spec, GraphbookTranslator())
    with dg.DagsterInstance.from_config(failed.dagster_home) as instance:
        options = dg.ReexecutionOptions(
            failed.run_id, step_selection=["parities__Parity.parities__Parity__commit"]
        )
        with dg.execute_job(
            recon, instance, reexecution_options=options, raise_on_error=False
        ) as result:
            assert not result.success
            failures = [e for e in result.all_events if e.is_step_failure]
            text = str(failures[0].event_specific_data.error)
    assert "shards 1 of 3 never arrived" in text, text


# ---------------------------------------------------------------------------------------------
# Run config


def test_shard_size_alone_in_run_config_of_a_step_defined_with_shards(tmp_path, nodes, run_wf):
    """The launchpad shows the definition's ``shards: 3``; a run that sets only
    ``runtime.shard_size`` gets shards of that size (the setting a run changed wins), not
    'runtime.shards (3) and runtime.shard_size (4) are both set'."""
    wf = _wf(tmp_path, n=12)
    run = run_wf(wf, [nodes], {**FAST, "Parity.runtime.shard_size": 4}, shards={"Parity": 3})
    assert run.success, run.failure
    assert len(_shard_steps(run)) == 3


@pytest.mark.parametrize(
    "bad",
    [
        {"Parity.runtime.shards": 0},
        {"Parity.runtime.shards": -2},
        {"Parity.runtime.shard_size": 0},
        {"Parity.runtime.shards": 2, "Parity.runtime.shard_size": 4},
    ],
)
def test_bad_shard_settings_are_refused_before_any_step_runs(tmp_path, nodes, run_wf, bad):
    """Run config no run could take is refused before the run starts (as ``--set``
    values of the wrong type are), not when the plan op's turn comes after every upstream step
    (hours, on a day of images)."""
    from dagster_graphbook.errors import RequestError

    wf = _wf(tmp_path, n=12)
    with pytest.raises(RequestError, match=r"Parity\.runtime: runtime\.shard") as refused:
        run_wf(wf, [nodes], {**FAST, **bad}, shards={"Parity": 3})
    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        assert instance.get_runs() == [], refused.value  # no run was started
    # a run launched from the UI: the executor refuses it before its first step
    config = {"ops": {"parities__Parity": {"config": {"runtime": {
        "num_workers": 0, "device": "cpu",
        **{k.split(".")[-1]: v for k, v in bad.items()},
    }}}}}  # fmt: skip
    said = _refused_at_start(tmp_path, nodes, config=config, shards={"Parity": 3})
    assert "Parity.runtime: runtime.shard" in (said or ""), said


def test_run_config_shards_on_an_unsharded_step_fails_saying_where(tmp_path, nodes, run_wf):
    wf = _wf(tmp_path, n=12)
    run = run_wf(wf, [nodes], {**FAST, "Parity.runtime.shard_size": 4})
    assert not run.success
    assert "defined as one op" in run.failure, run.failure


# ---------------------------------------------------------------------------------------------
# The op graph: tags, pools, executors


def _inner_ops(tmp_path, nodes, **kw):
    wf = _wf(tmp_path, n=12)
    spec = GraphbookWorkflow(wf, custom_nodes=[nodes], shards={"Parity": 3}, **kw)
    defs = build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)
    job = defs.resolve_job_def("parities")
    graph = job.graph.node_named("parities__Parity").definition
    return {node.name.rsplit("__", 1)[-1]: node.definition for node in graph.nodes}


def test_only_the_shard_ops_request_the_steps_gpus(tmp_path, nodes):
    """With ``gpus={"Parity": 1}`` each shard op asks Kubernetes/Ray/Dask for a GPU; the
    plan op (splits a list) and the commit op (merges results) hold none."""
    ops = _inner_ops(tmp_path, nodes, gpus={"Parity": 1})
    assert "dagster-k8s/config" in ops["shard"].tags
    for name in ("plan", "commit"):
        tags = ops[name].tags
        assert "dagster-k8s/config" not in tags, (name, tags)
        assert "dagster-ray/config" not in tags, (name, tags)


def test_each_inner_op_is_in_the_steps_pool(tmp_path, nodes):
    ops = _inner_ops(tmp_path, nodes)
    assert ops["shard"].pool == "gpu"


def test_a_sharded_step_on_the_dask_executor_is_refused_at_load(tmp_path, nodes):
    """dagster-dask never runs mapped steps (silently): a sharded step on it is a load
    error naming the executors that work."""
    from dagster_dask import dask_executor

    with pytest.raises(WorkflowError, match="(?i)dask"):
        _inner_ops(tmp_path, nodes, executor=dask_executor)


def test_a_job_with_a_sharded_step_runs_its_shards_in_parallel_by_default(tmp_path, nodes):
    """'A job with a sharded step runs its shards in parallel by default (the
    multiprocess executor unless the user chose another)'."""
    wf = _wf(tmp_path, n=12)
    spec = GraphbookWorkflow(wf, custom_nodes=[nodes], shards={"Parity": 3})
    defs = build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)
    job = defs.resolve_job_def("parities")
    default = job.executor_def.config_schema.as_field().default_value
    assert "multiprocess" in default, default


# ---------------------------------------------------------------------------------------------
# Downstream steps, two sharded steps in a row, the lifecycle


def _defs(tmp_path, nodes, wf, **kw):
    spec = GraphbookWorkflow(wf, custom_nodes=[nodes], **kw)
    return build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)


def test_a_later_run_of_the_child_reads_the_sharded_steps_latest_notes(
    tmp_path, nodes, dagster_home
):
    """Run 1 materializes everything; run 2 materializes only Collect, which reads Parity's
    latest materialization (the commit's)."""
    wf = _wf(tmp_path, n=12, collect=True)
    defs = _defs(tmp_path, nodes, wf, shards={"Parity": 3})
    job = defs.resolve_job_def("parities")
    config = {"ops": {"parities__Parity": {"config": FAST_OPS}}}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        first = job.execute_in_process(run_config=config, instance=instance)
        assert first.success
        second = job.execute_in_process(
            instance=instance, asset_selection=[dg.AssetKey(["parities", "Collect"])]
        )
        assert second.success
        value = defs.load_asset_value(dg.AssetKey(["parities", "Collect"]), instance=instance)
        parity = defs.load_asset_value(
            dg.AssetKey(["parities", "Parity", "even"]), instance=instance
        )
    assert sorted(_i(value)) == list(range(12))
    assert _i(parity) == [0, 2, 4, 6, 8, 10]


def test_two_sharded_steps_in_a_row_and_shards_for_every_batch_step(tmp_path, nodes, run_wf):
    """``shards=2`` shards both batch steps; the second reads the first's two pins."""
    steps = [
        step_node("0", "Numbers", {"n": 11}, source=True),
        step_node("1", "Parity", {}, outputs=["even", "odd"], label="Parity"),
        step_node("3", "Parity", {}, outputs=["even", "odd"], label="Again"),
    ]
    edges = [edge("0", "out", "1"), edge("1", "even", "3"), edge("1", "odd", "3")]
    wf = write_workflow(tmp_path, "chain", steps, edges)
    params = {**FAST, "Again.runtime.num_workers": 0, "Again.runtime.device": "cpu"}
    whole = run_wf(wf, [nodes], params)
    sharded = run_wf(wf, [nodes], params, shards=2)
    assert whole.success and sharded.success, sharded.failure
    assert len(_shard_steps(sharded)) == 4
    assert sharded.notes == whole.notes


def test_on_start_and_on_end_run_once_per_shard(tmp_path, nodes, run_wf):
    marks = _marks(tmp_path)
    wf = _wf(tmp_path, n=12, params={"marks": str(marks)})
    run = run_wf(wf, [nodes], FAST, shards={"Parity": 3})
    assert run.success, run.failure
    assert _starts(marks) == ["end"] * 3 + ["start"] * 3


# ---------------------------------------------------------------------------------------------
# Leftovers


def _step_outputs(root):
    return sorted(p for p in root.rglob(".step_outputs") if p.is_dir())


def test_shard_intermediates_are_pruned_like_the_notes(tmp_path, nodes, dagster_home):
    """Each run's intermediates (the slices and the shard results, full copies of the
    step's input and output notes) are pruned as the notes are: notes_keep=1 and four runs
    leave one run's intermediates."""
    wf = _wf(tmp_path, n=12)
    defs = _defs(tmp_path, nodes, wf, shards={"Parity": 3}, notes_keep=1)
    job = defs.resolve_job_def("parities")
    config = {"ops": {"parities__Parity": {"config": FAST_OPS}}}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for _ in range(4):
            assert job.execute_in_process(run_config=config, instance=instance).success
    versions = list((tmp_path / "notes" / "parities" / "Parity" / "even").glob("*.pkl"))
    assert len(versions) == 1
    folders = _step_outputs(tmp_path)
    assert len(folders) == 1, folders
    runs = [p.name for p in folders[0].iterdir()]
    assert len(runs) <= 1, runs


def test_shard_intermediates_live_under_the_workflows_notes_dir(tmp_path, nodes, dagster_home):
    """The shard intermediates go under the workflow's notes_dir (shared storage for k8s
    pods and Ray workers), not the instance's local storage, which another machine running the
    commit could not read."""
    wf = _wf(tmp_path, n=12)
    defs = _defs(tmp_path, nodes, wf, shards={"Parity": 3})
    config = {"ops": {"parities__Parity": {"config": FAST_OPS}}}
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        assert (
            defs.resolve_job_def("parities")
            .execute_in_process(run_config=config, instance=instance)
            .success
        )
    assert (tmp_path / "notes" / "parities" / "Parity" / "even").exists()
    assert _step_outputs(tmp_path / "notes"), _step_outputs(tmp_path)


def test_no_temporary_files_or_worker_processes_are_left(tmp_path, nodes, run_wf):
    import multiprocessing

    wf = _wf(tmp_path, n=12)
    params = {"Parity.runtime.num_workers": 1, "Parity.runtime.device": "cpu"}
    run = run_wf(wf, [nodes], params, shards={"Parity": 3}, notes_dir=str(tmp_path / "notes"))
    assert run.success, run.failure
    leftovers = [
        p
        for p in tmp_path.rglob("*")
        if p.is_file()
        and (p.name.startswith(".") or ".tmp" in p.name)
        and not p.name.endswith("-setup.lock")  # the instance's own lock, kept on purpose
    ]
    assert leftovers == [], leftovers
    assert multiprocessing.active_children() == []


# ---------------------------------------------------------------------------------------------
# More of the unsharded step's behaviour


def test_a_failing_blocking_check_on_a_sharded_step_stops_its_child(tmp_path, nodes, dagster_home):
    wf = _wf(tmp_path, n=12, collect=True)
    checks = [StepCheck(step="Parity", metric="correct", min=1000, severity="blocking")]
    defs = _partitioned_defs(tmp_path, nodes, wf, shards={"Parity": 3}, checks=checks)
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("parities").execute_in_process(
            run_config={"ops": {"parities__Parity": {"config": FAST_OPS}}},
            instance=instance,
            partition_key="2026-02-03",
            raise_on_error=False,
        )
    assert not result.success
    started = {e.step_key for e in result.all_events if e.is_step_start}
    assert "parities__Collect" not in started, started
    failures = [str(e.event_specific_data.error) for e in result.all_events if e.is_step_failure]
    assert any("blocking check" in f for f in failures), failures


def test_a_sharded_sink_writes_the_unsharded_parquet_table(tmp_path, nodes, run_wf):
    import pandas as pd

    wf = _wf(tmp_path, n=12)
    whole = run_wf(wf, [nodes], FAST, notes_dir=str(tmp_path / "a"))
    sharded = run_wf(wf, [nodes], FAST, shards={"Parity": 3}, notes_dir=str(tmp_path / "b"))
    assert whole.success and sharded.success, sharded.failure
    for pin in ("even", "odd"):
        (a,) = (tmp_path / "a" / "parities" / "Parity" / pin).glob("*.parquet")
        (b,) = (tmp_path / "b" / "parities" / "Parity" / pin).glob("*.parquet")
        pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b))


def test_a_failing_note_is_named_by_its_number_in_the_whole_step(tmp_path, nodes, run_wf):
    wf = _wf(tmp_path, params={"fail_at": 25})
    whole = run_wf(wf, [nodes], FAST)
    sharded = run_wf(wf, [nodes], FAST, shards={"Parity": 3})
    assert not whole.success and not sharded.success
    first = lambda text: text.splitlines()[0].split(": ", 1)[1]  # noqa: E731  (no step key)
    assert first(sharded.failure) == first(whole.failure), (sharded.failure, whole.failure)


def test_resuming_a_sharded_run_without_its_shards_setting_is_refused_clearly(
    tmp_path, nodes, run_wf
):
    """from_failure must build the same job: without ``shards`` the job has no shard steps."""
    marks = _marks(tmp_path)
    wf = _wf(tmp_path, n=12, params={"marks": str(marks), "fail_at": 5})
    failed = run_wf(wf, [nodes], FAST, shards={"Parity": 3})
    assert not failed.success
    try:
        resumed = run_wf(wf, [nodes], from_failure=failed.run_id)
    except Exception as exc:
        assert "shard" in str(exc).lower() or "same job" in str(exc).lower(), str(exc)
        return
    assert not resumed.success
    assert "shard" in (resumed.failure or "").lower(), resumed.failure


def test_external_deps_of_a_sharded_step(tmp_path, nodes, dagster_home):
    wf = _wf(tmp_path, n=12)
    defs = _defs(
        tmp_path,
        nodes,
        wf,
        shards={"Parity": 3},
        external_deps={"Parity": [["sample", "incoming"]]},
    )
    job = defs.resolve_job_def("parities")
    assets = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert "sample/incoming" in assets
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = job.execute_in_process(
            run_config={"ops": {"parities__Parity": {"config": FAST_OPS}}}, instance=instance
        )
    assert result.success


def _refused_at_start(tmp_path, nodes, config=None, **kw):
    """What graphbook_executor's start-of-run check says of a run with no partition key of a
    workflow whose Parity holds ``{partition_key}`` (None: it lets the run start)."""
    from types import SimpleNamespace

    from dagster._core.execution.api import create_execution_plan

    from dagster_graphbook.defs.executor import _refuse_before_start

    wf = _wf(tmp_path, n=12, params={"tag": "day-{partition_key}"})
    job = _defs(tmp_path, nodes, wf, **kw).resolve_job_def("parities")
    config = config or {"ops": {"parities__Parity": {"config": FAST_OPS}}}
    context = SimpleNamespace(
        dagster_run=SimpleNamespace(tags={}),
        job=SimpleNamespace(get_definition=lambda: job),
        run_config=config,
    )
    try:
        _refuse_before_start(context, create_execution_plan(job, run_config=config))
    except dg.Failure as exc:
        return exc.description
    return None


def test_an_unfilled_partition_key_in_a_sharded_step_is_refused_at_the_runs_start(tmp_path, nodes):
    """graphbook_executor refuses, before any step, a run with no partition key when a
    step parameter holds ``{partition_key}``; a sharded step's step keys
    (``parities__Parity.parities__Parity__shard[shard_0]``) and resolved config (under each inner
    op) are read as its top-level node's."""
    assert "Parity.tag" in (_refused_at_start(tmp_path, nodes) or "")  # unsharded: refused
    assert "Parity.tag" in (_refused_at_start(tmp_path, nodes, shards={"Parity": 3}) or "")


def test_the_sharded_materialization_carries_the_unsharded_entries(tmp_path, nodes, run_wf):
    """The same metadata entries (plus ``shards`` in details and ``figures_note``), and the
    same counts."""
    wf = _wf(tmp_path, n=12)
    whole = run_wf(wf, [nodes], FAST)
    sharded = run_wf(wf, [nodes], FAST, shards={"Parity": 3})
    meta = {k: m for k, _, m in _materializations(sharded.dagster_home, sharded.run_id)}
    meta_whole = {k: m for k, _, m in _materializations(whole.dagster_home, whole.run_id)}
    for pin in ("parities/Parity/even", "parities/Parity/odd"):
        a, b = meta_whole[pin], meta[pin]
        assert set(a) - set(b) == set(), set(a) - set(b)
        for key in ("dagster/row_count", "notes_in", "items", "errors_skipped", "correct"):
            assert a[key] == b[key], key
        details, details_whole = b["details"], a["details"]
        assert details["shards"] == 3
        for key, value in details_whole.items():
            if key not in ("batches", "chunks"):
                assert details.get(key) == value, (key, details.get(key), value)


def test_twelve_shards_keep_their_order(tmp_path, nodes, run_wf):
    """More than ten shards: mapping keys shard_10, shard_11 sort before shard_2 as text."""
    wf = _wf(tmp_path, n=24, collect=True)
    whole = run_wf(wf, [nodes], FAST)
    sharded = run_wf(wf, [nodes], FAST, shards={"Parity": 12})
    assert whole.success and sharded.success, sharded.failure
    assert sharded.notes == whole.notes


def test_an_unpicklable_note_is_named_as_unsharded(tmp_path, nodes, run_wf):
    """Note 25 gets a threading.Lock: sharded as unsharded, the failure names the note's
    key ('key 'lock' (lock) cannot be stored'), not a bare pickling error. The failure is
    final: the shard op's crash-only retry policy does not run the shard again to fail alike."""
    wf = _wf(tmp_path, params={"lock_at": 25})
    whole = run_wf(wf, [nodes], FAST)
    marks = _marks(tmp_path)
    sharded = run_wf(wf, [nodes], {**FAST, "Parity.marks": str(marks)}, shards={"Parity": 3})
    assert not whole.success and not sharded.success
    assert "key 'lock'" in whole.failure, whole.failure
    assert "key 'lock'" in sharded.failure, sharded.failure
    assert _starts(marks).count("start") == 3  # each shard once


def test_a_resume_of_a_resume_reads_the_shards_of_the_first_run(tmp_path, nodes, run_wf):
    """Shard 3 fails in run 1 and again in its resume (run 2); run 3 resumes run 2: the commit
    reads shards 1 and 2 from run 1 (the grandparent), shard 3 from run 3."""
    marks = _marks(tmp_path)
    wf = _wf(tmp_path, collect=True, params={"marks": str(marks), "fail_at": 25, "fail_times": 2})
    shards = {"Parity": 3}
    first = run_wf(wf, [nodes], FAST, shards=shards)
    second = run_wf(wf, [nodes], from_failure=first.run_id, shards=shards)
    assert not first.success and not second.success
    third = run_wf(wf, [nodes], from_failure=second.run_id, shards=shards)
    assert third.success, third.failure
    assert sorted(_i(third["Collect"]["out"])) == list(range(30))
    assert [s.rsplit(".", 1)[-1] for s in _steps_run(third.dagster_home, third.run_id)] == [
        "parities__Collect",
        "parities__Parity__commit",
        "parities__Parity__shard[shard_2]",
    ]


# ---------------------------------------------------------------------------------------------
# The multiprocess executor (slow: a process per step; two tests)


def test_a_shard_killed_with_kill_9_is_retried_alone(tmp_path, nodes, run_wf):
    """A shard killed with kill -9 mid-run is retried alone (the other shards' outputs are
    reused), and the run's materializations are complete. Shard 2 of 2
    SIGKILLs its own process on its first attempt (multiprocess executor): the shard op's
    crash-only retry policy runs it again (runtime.retries acts through RetryRequested,
    which a killed process never raises)."""
    marks = _marks(tmp_path)
    params = {"marks": str(marks), "fail_at": 5, "interrupt": 2}
    wf = _wf(tmp_path, n=8, params=params, collect=True)
    # no executor named: a sharded workflow's default, multiprocess (shards in parallel)
    run = run_wf(wf, [nodes], FAST, shards={"Parity": 2}, executor=None)
    assert (marks / "failed_once0").exists()  # it was killed once
    assert run.success, run.failure
    assert _starts(marks).count("start") == 3  # shard 1 once, shard 2 twice
    assert len(_shard_steps(run)) == 2
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        said = [r.user_message for r in instance.all_logs(run.run_id)]
    assert any("multiprocess executor" in m for m in said), said[:5]
    whole = run_wf(wf, [nodes], FAST)  # in process, and shard 2's note 5 no longer kills
    assert whole.success, whole.failure
    assert run.notes == whole.notes  # every pin, in the unsharded order


@pytest.mark.filterwarnings("ignore:Function `load_defs` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("setting", ["{ClassifyShapes: 3}", "{ClassifyShapes: {shard_size: 100}}"])
def test_the_components_shards_option(tmp_path, setting):
    from tests.support.defs_folder import load_defs_folder
    from tests.support.nightly import NIGHTLY_YAML

    yaml = NIGHTLY_YAML.rstrip() + f"\n      shards: {setting}\n"
    defs = load_defs_folder(tmp_path, "gb_shard_defs", {"nightly": yaml})
    job = defs.resolve_job_def("nightly_shapes")
    graph = job.graph.node_named("nightly_shapes__ClassifyShapes").definition
    assert sorted(n.name for n in graph.nodes) == [
        "nightly_shapes__ClassifyShapes__commit",
        "nightly_shapes__ClassifyShapes__plan",
        "nightly_shapes__ClassifyShapes__shard",
    ]


def test_a_check_on_a_ratio_figure_keeps_passing_once_the_step_is_sharded(
    tmp_path, nodes, dagster_home
):
    """StepCheck(metric="ratio", min=0.4) passes unsharded (ratio 0.5). Sharded with no
    on_commit the float figure is left out; the check's failure then says why and names
    on_commit (sharding a step, a deployment choice, must not break its checks silently)."""
    wf = _wf(tmp_path, n=12, params={"ratio": 0.5})
    checks = [StepCheck(step="Parity", metric="ratio", min=0.4, severity="warn")]
    outcome = {}
    for shards in (None, {"Parity": 3}):
        defs = _partitioned_defs(tmp_path, nodes, wf, shards=shards, checks=checks)
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            result = defs.resolve_job_def("parities").execute_in_process(
                run_config={"ops": {"parities__Parity": {"config": FAST_OPS}}},
                instance=instance,
                partition_key="2026-02-03",
                raise_on_error=False,
            )
        (evaluation,) = [
            e for e in result.get_asset_check_evaluations() if e.check_name == "ratio_min_0_4"
        ]
        outcome[bool(shards)] = (evaluation.passed, evaluation.description)
    assert outcome[False][0], outcome
    assert outcome[True][0] or "on_commit" in (outcome[True][1] or ""), outcome


def test_files_written_by_dump_fn_are_the_unsharded_ones(tmp_path, nodes, run_wf):
    metas = {}
    for shards in (None, {"Parity": 3}):
        marks = tmp_path / f"files-{bool(shards)}"
        marks.mkdir()
        wf = _wf(tmp_path, n=12, parity="Dumping", params={"marks": str(marks)})
        run = run_wf(wf, [nodes], FAST, shards=shards)
        assert run.success, run.failure
        assert len(list(marks.glob("item-*"))) == 24
        metas[bool(shards)] = {k: m for k, _, m in _materializations(run.dagster_home, run.run_id)}
    whole, sharded = metas[False]["parities/Parity/even"], metas[True]["parities/Parity/even"]
    assert sharded["files_written"] == whole["files_written"] == 24
    assert sharded["files_bytes"] == whole["files_bytes"]
    manifest = sharded["files_manifest"]
    lines = open(manifest).read().splitlines() if os.path.isfile(manifest) else []
    assert len([x for x in lines if "item-" in x]) == 24, (manifest, lines[:3])


@pytest.mark.parametrize("streaming", [["Numbers", "Pass"], ["Collect", "Again"]])
def test_a_streaming_segment_before_or_after_a_sharded_step(tmp_path, nodes, run_wf, streaming):
    """Numbers -> Pass -> Parity (sharded) -> Collect -> Again, with the segment [Numbers,
    Pass] or [Collect, Again] streamed."""
    steps = [
        step_node("0", "Numbers", {"n": 12}, source=True),
        step_node("4", "Collect", {}, label="Pass"),
        step_node("1", "Parity", {}, outputs=["even", "odd"], label="Parity"),
        step_node("2", "Collect", {}, label="Collect"),
        step_node("3", "Collect", {}, label="Again"),
    ]
    edges = [
        edge("0", "out", "4"),
        edge("4", "out", "1"),
        edge("1", "even", "2"),
        edge("1", "odd", "2"),
        edge("2", "out", "3"),
    ]
    wf = write_workflow(tmp_path, "segments", steps, edges)
    whole = run_wf(wf, [nodes], FAST, streaming=streaming)
    sharded = run_wf(wf, [nodes], FAST, streaming=streaming, shards={"Parity": 3})
    assert whole.success and sharded.success, sharded.failure
    assert sharded.notes == whole.notes


# ---------------------------------------------------------------------------------------------
# One code version per committed step


def _versioned(tmp_path, n):
    """Numbers(n) -> Stamp, its node file and its flags folder."""
    nodes_dir = copy_nodes(tmp_path / "nodes", "parities_nodes.py", "sharded_steps")
    copy_nodes(nodes_dir, "versioned_nodes.py", "sharded_versions")
    flags = tmp_path / "flags"
    flags.mkdir()
    nodes_ = [
        step_node("0", "Numbers", {"n": n}, source=True),
        step_node("1", "Stamp", {"flags": str(flags), "fail_at": n - 1}, label="Stamp"),
    ]
    wf = write_workflow(tmp_path, "versioned", nodes_, [edge("0", "out", "1")])
    return wf, nodes_dir, nodes_dir / "versioned_nodes.py", flags


def _save_new_version(node_file):
    """The user's edit: the same node, stamping "new" (another size, so every cache sees it)."""
    text = node_file.read_text()
    node_file.write_text(text.replace('VERSION = "old"', 'VERSION = "new, edited"'))


STAMP_FAST = {"Stamp.runtime.num_workers": 0, "Stamp.runtime.device": "cpu"}


def test_a_node_file_saved_between_shards_is_refused_at_the_commit(tmp_path, run_wf):
    """Shards run one at a time in step processes of their own (the multiprocess executor,
    max_concurrent 1): the first runs the old code, the node file is saved while it runs, the
    second imports the new one. The commit refuses to make one asset of the two, naming the
    step, the shards and both versions; a whole run afterwards commits the new code alone."""
    import threading
    import time

    wf, nodes_dir, node_file, flags = _versioned(tmp_path, n=8)

    def edit_while_the_first_shard_runs():
        deadline = time.monotonic() + 240
        while not (flags / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _save_new_version(node_file)
        (flags / "go").touch()

    editor = threading.Thread(target=edit_while_the_first_shard_runs, daemon=True)
    editor.start()
    one_at_a_time = {"execution": {"config": {"multiprocess": {"max_concurrent": 1}}}}
    run = run_wf(
        wf, [nodes_dir], STAMP_FAST, shards={"Stamp": 2}, executor=None, run_config=one_at_a_time
    )
    editor.join(timeout=10)
    assert not run.success
    failure = run.failure or ""
    assert "step 'Stamp'" in failure and "cannot commit shards that ran different code" in failure
    said = dict(re.findall(r"shard (\d) of 2 ran code version (\w+)", failure))
    assert sorted(said) == ["0", "1"] and len(set(said.values())) == 2, failure
    new = re.findall(r"the step's code is now version (\w+)", failure)
    assert new and new[0] in said.values(), failure  # the shard that ran second, and the commit
    assert "Re-execute the whole step, all of its shards" in failure, failure
    committed = [key for key, _, _ in _materializations(run.dagster_home, run.run_id)]
    assert committed == ["versioned/Numbers"], committed  # nothing of Stamp
    print(failure.splitlines()[0])

    whole = run_wf(wf, [nodes_dir], STAMP_FAST, shards={"Stamp": 2})
    assert whole.success, whole.failure
    assert {n["version"] for n in whole.notes["Stamp"]["out"]} == {"new, edited"}


@pytest.mark.parametrize("edited", [True, False], ids=["code-fixed", "same-code"])
def test_a_resume_commits_only_shards_of_the_steps_code_now(tmp_path, run_wf, edited):
    """The fix-then-resume loop: shard 3 of 3 fails, the step's node file is saved (or not),
    from_failure reuses shards 1-2 and runs shard 3. With the code changed, the commit refuses
    (shards 0-1 ran the old version, shard 2 the new); with the same code it commits."""
    wf, nodes_dir, node_file, flags = _versioned(tmp_path, n=12)
    (flags / "go").touch()
    (flags / "broken").touch()
    shards = {"Stamp": 3}
    failed = run_wf(wf, [nodes_dir], STAMP_FAST, shards=shards)
    assert not failed.success and "flags/broken exists" in (failed.failure or ""), failed.failure
    (flags / "broken").unlink()
    if edited:
        _save_new_version(node_file)
    resumed = run_wf(wf, [nodes_dir], from_failure=failed.run_id, shards=shards)
    ran = [s for s in _steps_run(resumed.dagster_home, resumed.run_id) if "shard[" in s]
    assert [s.rsplit("[", 1)[-1] for s in ran] == ["shard_2]"], ran  # shards 0-1 were reused
    if not edited:
        assert resumed.success, resumed.failure
        assert [n["i"] for n in resumed.notes["Stamp"]["out"]] == list(range(12))
        assert {n["version"] for n in resumed.notes["Stamp"]["out"]} == {"old"}
        return
    assert not resumed.success
    failure = resumed.failure or ""
    said = dict(
        (tuple(i.split(", ")), v)
        for i, v in re.findall(r"shards? ([\d, ]+) of 3 ran code version (\w+)", failure)
    )
    assert set(said) == {("0", "1"), ("2",)}, failure
    assert said[("0", "1")] != said[("2",)], failure
    assert f"the step's code is now version {said[('2',)]}" in failure, failure
    assert "not a re-execution from failure" in failure, failure
    assert _materializations(resumed.dagster_home, resumed.run_id) == []  # Numbers was reused


FULL_DISK_SHARDS = """
import sys
from dagster_graphbook import run_workflow

wf, nodes, home, notes_dir = sys.argv[1:]
if __name__ == "__main__":
    params = {"Stamp.runtime.num_workers": 0, "Stamp.runtime.device": "cpu",
              "Stamp.payload": 100000}
    run = run_workflow(wf, custom_nodes=[nodes], params=params,
                       dagster_home=home, notes_dir=notes_dir, shards={"Stamp": 2},
                       executor="in_process")
    print("FAILURE", run.failure)
"""


def test_a_full_disk_under_a_shards_result_names_the_file_and_its_file_system(tmp_path):
    """The notes_dir on a real 256 KiB tmpfs: the slices fit, a shard's result (8 notes of 100
    KB) does not. The failure names the output, the file it was writing and the full file
    system, in words ('its output's cannot be stored' named none)."""
    from tests.support.mounts import can_unshare

    why = can_unshare()
    if why:
        pytest.skip(why)
    import subprocess
    import sys

    wf, nodes_dir, _, flags = _versioned(tmp_path, n=8)
    (flags / "go").touch()
    small, home = tmp_path / "small", tmp_path / "home"
    small.mkdir()
    home.mkdir()
    script = tmp_path / "full_disk_shards.py"
    script.write_text(FULL_DISK_SHARDS)
    shell = (
        f"mount -t tmpfs -o size=256k tmpfs {small} && exec {sys.executable} {script} {wf} "
        f"{nodes_dir} {home} {small}"
    )
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "FAILURE" in proc.stdout, said[-3000:]
    failure = proc.stdout.split("FAILURE", 1)[1]
    found = re.search(
        r"versioned__Stamp__shard\[shard_\d\]: output 'result' cannot be stored at "
        rf"({re.escape(str(small))}/\S+\.pkl) \(on the tmpfs file system mounted at "
        rf"{re.escape(str(small))}, [\d.]+ MiB free now\): OSError: \[Errno 28\] No space left",
        failure,
    )
    assert found, failure[:3000]
    assert "/.step_outputs/" in found.group(1), found.group(1)


def test_a_run_killed_as_a_process_group_leaves_no_semaphores(tmp_path):
    """``kill -9 -PGID`` of a sharded run (multiprocess, loader workers) while a shard runs:
    the named semaphores its processes made (``/dev/shm/sem.mp-*``) are unlinked by the
    resource tracker, which runs in a session of its own and outlives the group; it left them
    for good when it died in the same kill. Only the names this run's processes map count
    (other work on the machine has its own)."""
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    import psutil

    wf, nodes_dir, _, flags = _versioned(tmp_path, n=8)
    home = tmp_path / "home"
    home.mkdir()
    script = tmp_path / "run.py"
    params = {"Stamp.runtime.num_workers": 1, "Stamp.runtime.device": "cpu"}
    script.write_text(
        textwrap.dedent(
            f"""
            from dagster_graphbook import run_workflow

            if __name__ == "__main__":  # the default executor: multiprocess, the forkserver
                run_workflow({str(wf)!r}, custom_nodes=[{str(nodes_dir)!r}], params={params!r},
                             dagster_home={str(home)!r}, shards={{"Stamp": 2}})
            """
        )
    )
    run = subprocess.Popen(
        [sys.executable, str(script)],
        start_new_session=True,  # a process group of its own, as a shell job or a service
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not (flags / "started").exists():  # shard 0 is in its batch, its loader running
        assert run.poll() is None and time.monotonic() < deadline, "shard 0 never started"
        time.sleep(0.1)
    tree = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
    semaphores = set()
    for process in tree:
        with open(f"/proc/{process.pid}/maps") as maps:
            semaphores |= {
                line.split("/dev/shm/", 1)[1].strip()
                for line in maps
                if "/dev/shm/sem.mp-" in line and "(deleted)" not in line
            }
    assert semaphores, "the run's processes map no named semaphore"
    os.killpg(run.pid, signal.SIGKILL)
    run.wait(timeout=30)

    def left():
        return sorted(s for s in semaphores if os.path.exists(f"/dev/shm/{s}"))

    deadline = time.monotonic() + 30
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left() == [], f"{len(left())} of the run's {len(semaphores)} semaphores stayed"
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == [], alive  # the tracker too has gone, its work done
