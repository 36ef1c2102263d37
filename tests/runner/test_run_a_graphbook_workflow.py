"""``run_workflow`` takes a whole ``GraphbookWorkflow``: its options as the code location builds
them, and a clear refusal where they cannot hold."""

from __future__ import annotations

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, run_workflow
from dagster_graphbook.errors import RequestError
from tests.support.nodes import copy_nodes


def _sample(repo, **options) -> GraphbookWorkflow:
    return GraphbookWorkflow(
        repo / "workflows" / "sample.json",
        custom_nodes=[repo / "custom_nodes" / "sample"],
        **options,
    )


def test_a_partitioned_spec_runs_its_day_with_its_tags(repo, tmp_path):
    days = dg.DailyPartitionsDefinition(start_date="2025-06-01")
    spec = _sample(repo, partitions_def=days, job_tags={"team": "vision"}, name="sample_days")
    run = run_workflow(spec, partition_key="2025-06-02", dagster_home=str(tmp_path))
    assert run.success, run.failure
    assert run.counts()["GenerateNumbers"] == {"out": 200}
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        record = instance.get_run_by_id(run.run_id)
        assert record.job_name == "sample_days"
        assert record.tags["team"] == "vision"
        assert record.tags["dagster/partition"] == "2025-06-02"


def test_an_option_given_both_on_the_spec_and_as_an_argument_is_refused(repo, tmp_path):
    with pytest.raises(RequestError, match=r"GraphbookWorkflow and name, streaming: give them"):
        run_workflow(_sample(repo), name="other", streaming=True, dagster_home=str(tmp_path))


def test_options_a_step_process_cannot_rebuild_are_refused_before_the_run(repo, tmp_path):
    days = dg.DailyPartitionsDefinition(start_date="2025-06-01")
    spec = _sample(repo, partitions_def=days, job_tags={"team": "vision"})
    with pytest.raises(RequestError, match=r"but not its partitions_def, job_tags: run it in"):
        run_workflow(
            spec, partition_key="2025-06-02", executor="multiprocess", dagster_home=str(tmp_path)
        )
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.get_runs() == []


def test_a_failed_partitioned_spec_run_resumes_in_process(tmp_path, monkeypatch):
    """A spec's options a step process could not rebuild (partitions, tags) do not stop an
    in-process run from resuming: its job is rebuilt from the spec itself."""
    flag = tmp_path / "fail"
    flag.touch()
    monkeypatch.setenv("RESUMABLE_DAYS_FAIL", str(flag))
    workflow = copy_nodes(tmp_path / "wf", "days.py", "resumable_days") / "days.py"
    days = dg.DailyPartitionsDefinition(start_date="2025-06-01")
    spec = GraphbookWorkflow(workflow, partitions_def=days, job_tags={"team": "vision"})
    home = str(tmp_path / "home")
    failed = run_workflow(spec, partition_key="2025-06-03", dagster_home=home)
    assert not failed.success and "asked to fail" in (failed.failure or "")
    flag.unlink()
    resumed = run_workflow(spec, from_failure=failed.run_id, dagster_home=home)
    assert resumed.success, resumed.failure
    assert [n["square"] for n in resumed["Square"]["out"]] == [0, 1, 4]
    assert {n["day"] for n in resumed["Square"]["out"]} == {"2025-06-03"}
    with dg.DagsterInstance.from_config(home) as instance:
        record = instance.get_run_by_id(resumed.run_id)
        assert record.tags["dagster/partition"] == "2025-06-03"
        assert record.tags["team"] == "vision"


def test_a_spec_naming_its_executor_runs_on_it(repo, tmp_path):
    spec = _sample(repo, executor="multiprocess", checks=[], overridable_functions=[])
    run = run_workflow(spec, dagster_home=str(tmp_path))
    assert run.success, run.failure
    assert run.counts()["GenerateNumbers"] == {"out": 200}
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        said = [e.user_message for e in instance.all_logs(run.run_id)]
    assert any("multiprocess executor" in m for m in said), said


def test_an_executor_given_both_on_the_spec_and_as_an_argument_is_refused(repo, tmp_path):
    spec = _sample(repo, executor="multiprocess")
    with pytest.raises(RequestError, match=r"GraphbookWorkflow and executor: give it"):
        run_workflow(spec, executor="in_process", dagster_home=str(tmp_path))
