"""``run_workflow`` takes a whole ``GraphbookWorkflow``: its options as the code location builds
them, and a clear refusal where they cannot hold."""

from __future__ import annotations

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, run_workflow
from dagster_graphbook.errors import RequestError


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
