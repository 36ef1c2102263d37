"""The trust rule at run time, tried as an attacker with Launchpad access: partition keys never
become code, and a key that is not one of the job's or is not safe in a path is refused. Each
test launches a real run on a real instance with the crafted key and checks the refusal (run
config: tests/plan/test_trust.py)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import GraphbookWorkflow, build_definitions
from tests.support.nodes import copy_nodes
from tests.support.workflows import step_node, write_nodes, write_workflow


def _day_defs(tmp_path: Path, partitions_def):
    nodes = copy_nodes(tmp_path / "day_nodes", "day_nodes.py", "partition_keys")
    wf = write_workflow(tmp_path, "days", [step_node("1", "Day", source=True)], [])
    return build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes], partitions_def=partitions_def)],
        notes_dir=str(tmp_path / "notes"),
    )


def test_partition_key_never_reaches_function_source(tmp_path, dagster_home):
    """13.3: ``{partition_key}`` fills string parameters, never the source of a function."""
    defs = _day_defs(tmp_path, dg.StaticPartitionsDefinition(["a", "b"]))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, partition_key="b"
        )
    assert result.success
    assert result.output_for_node("days__Day", "out") == [{"path": "in/b", "fn": "{partition_key}"}]


def test_crafted_partition_key_on_an_unpartitioned_job_is_refused(tmp_path, dagster_home):
    """13.3: a partition tag on an unpartitioned job (the Launchpad lets anyone add tags) used to
    be substituted into every string parameter, code included."""
    marker = tmp_path / "pwned"
    defs = _day_defs(tmp_path, None)
    key = f"' + str(open({str(marker)!r}, 'w').write('x')) + '"
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, tags={"dagster/partition": key}, raise_on_error=False
        )
        failure = _failure(instance, result.run_id)
    assert not result.success and not marker.exists()
    assert "workflow 'days', step 'Day' (node 1)" in failure and "refused" in failure, failure
    # on a partitioned job, a key outside its partitions is refused as well
    defs = _day_defs(tmp_path, dg.StaticPartitionsDefinition(["a", "b"]))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, tags={"dagster/partition": "zzz"}, raise_on_error=False
        )
        assert not result.success and "zzz" in _failure(instance, result.run_id)


@pytest.mark.parametrize("key", ["../../evil", "{0.__class__}", "a/b", ".hidden"])
def test_crafted_dynamic_partition_keys_are_refused(tmp_path, dagster_home, key):
    """13.3: a dynamic partition added through the UI (or the API) with path or format syntax is
    refused before the step reads or writes anything with it."""
    defs = _day_defs(tmp_path, dg.DynamicPartitionsDefinition(name="days"))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        instance.add_dynamic_partitions("days", [key])
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, partition_key=key, raise_on_error=False
        )
        failure = _failure(instance, result.run_id)
    assert not result.success
    assert f"partition key {key!r} refused" in failure, failure
    outside = [p for p in tmp_path.rglob("*.pkl") if (tmp_path / "notes") not in p.parents]
    assert not outside and not list((tmp_path / "notes").rglob("*.pkl")), outside


def test_dynamic_partition_keys_the_store_cannot_hold_are_refused(tmp_path, dagster_home):
    """A 300-character dynamic partition key passed the key check; the step did all its work,
    then failed storing it (``OSError: File name too long``). The key names a folder of the
    notes store, so past 255 bytes of UTF-8 (NAME_MAX) it is refused before the step works,
    saying the limit; a key of exactly 255 bytes runs and stores."""
    marker = tmp_path / "worked"
    nodes = write_nodes(
        tmp_path / "long_nodes",
        "long_nodes.py",
        f"""
        from graphbook import step, source


        @step("Trust/Work")
        @source()
        def work(ctx):
            open({str(marker)!r}, "a").write("x")
            yield {{"out": {{"i": 1}}}}
        """,
    )
    wf = write_workflow(tmp_path, "long_keys", [step_node("1", "Work", source=True)], [])
    days = dg.DynamicPartitionsDefinition(name="long_keys")
    defs = build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes], partitions_def=days)],
        notes_dir=str(tmp_path / "notes"),
    )
    job = defs.resolve_job_def("long_keys")
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for key, size in (("k" * 300, 300), ("é" * 128, 256)):
            instance.add_dynamic_partitions("long_keys", [key])
            result = job.execute_in_process(
                instance=instance, partition_key=key, raise_on_error=False
            )
            failure = _failure(instance, result.run_id)
            assert not result.success
            assert f"({size} bytes) refused" in failure and "at most 255 bytes" in failure, failure
            assert key not in failure and len(failure) < 1000, failure  # its start, not all of it
            assert not marker.exists() and not list((tmp_path / "notes").rglob("*.pkl"))
        longest = "k" * 255
        instance.add_dynamic_partitions("long_keys", [longest])
        result = job.execute_in_process(instance=instance, partition_key=longest)
    assert result.success and marker.read_text() == "x"
    [stored] = (tmp_path / "notes").rglob("*.pkl")
    assert stored.parent.name == longest


def _failure(instance: dg.DagsterInstance, run_id: str) -> str:
    from dagster_graphbook.runner.failure import failure_message as _failure_message

    return _failure_message(instance, run_id)
