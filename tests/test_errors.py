"""A failed step's headline is ours (workflow, step, item), with the item, note and step as
metadata: every failure path ends in a ``GraphbookError`` (a ``dg.Failure``), read back from a
real instance's STEP_FAILURE event, through GraphQL, and in the CLI's failure message."""

from __future__ import annotations

import dagster as dg
import pytest

from dagster_graphbook import GraphbookError, GraphbookWorkflow, WorkflowError, build_definitions
from dagster_graphbook.execution.errors import StepFailure
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

WORKERS = {
    "Work.runtime.num_workers": 1,
    "Work.runtime.dump_workers": 1,
    "Work.runtime.device": "cpu",
    "Work.runtime.stall_warning_s": 0.0,
}


@pytest.fixture
def flows(tmp_path):
    """``(plain workflow, batch workflow, custom nodes)``: Items -> Plain and Items -> Work."""
    nodes = copy_nodes(tmp_path / "nodes", "fl_nodes.py", "error_steps")
    plain = write_workflow(
        tmp_path,
        "plainfail",
        [step_node("1", "Items", source=True), step_node("2", "Plain")],
        [edge("1", "out", "2")],
    )
    batch = write_workflow(
        tmp_path,
        "batchfail",
        [step_node("1", "Items", source=True), step_node("2", "Work")],
        [edge("1", "out", "2")],
    )
    return plain, batch, nodes


def _step_failure(home: str, run_id: str):
    """The run's one STEP_FAILURE event (its step key and data)."""
    instance = dg.DagsterInstance.from_config(home)
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    assert len(records) == 1, [r.message for r in records]
    return records[0].step_key, records[0].dagster_event.step_failure_data


def _meta(data) -> dict:
    return {k: v.value for k, v in data.user_failure_data.metadata.items()}


def test_plain_step_failure_headline_and_metadata(flows, run_wf, dagster_home):
    plain, _, nodes = flows
    run = run_wf(plain, custom_nodes=[nodes], params={"Plain.bad": 3})
    assert not run.success
    step_key, data = _step_failure(dagster_home, run.run_id)
    headline = data.user_failure_data.description
    assert headline == (
        "workflow 'plainfail', step 'Plain' (node 2): failed on note 3 "
        "{'id': 3, 'items': [3]}: ValueError: cannot handle 3 (to record failed notes and go on "
        "instead: runtime.on_item_error: skip; in the Launchpad in the step op's config, or "
        "--set Plain.runtime.on_item_error=skip)"
    )
    # the error Dagster records is ours, not "Error occurred while executing op"
    assert data.error.cls_name == "StepFailure"
    assert "Error occurred while executing" not in data.error.to_string()
    meta = _meta(data)
    assert (meta["workflow"], meta["step"], meta["node"]) == ("plainfail", "Plain", "2")
    assert meta["note_index"] == "3" and meta["stage"] == "step"
    assert meta["note"] == '{"id": 3, "items": [3]}'  # a JSON preview of the note
    assert meta["exception"] == "ValueError"
    assert "cannot handle 3" in meta["traceback"] and "fl_nodes.py" in meta["traceback"]
    # the CLI / run_workflow prints the same headline first, then the traceback's tail
    first, *rest = run.failure.splitlines()
    assert first == f"{step_key}: {headline}"
    assert any("fl_nodes.py" in line for line in rest)


@pytest.mark.parametrize(
    "params, said, item",
    [
        (
            {"Work.load_error": 3},
            "load_fn failed on item 3 (note 3, item 0): OSError: unreadable 3",
            3,
        ),
        (
            {"Work.model_error": 3},
            "on_item_batch failed on item 2 (note 2, item 0): RuntimeError: model exploded on 3",
            2,
        ),
        ({"Work.dump_error": 3}, "dump_fn failed on item 3 (note 3, item 0): ValueError: ", 3),
        (
            {"Work.hang": 3, "Work.runtime.call_timeout_s": 1.0},
            "load_fn failed on item 3 (note 3, item 0)",
            3,
        ),
        ({"Work.die_load": 3}, "a loader worker process died", None),
        ({"Work.die_dump": 3}, "a dump worker process died", None),
    ],
    ids=["load", "model", "dump", "timeout", "loader-death", "dump-death"],
)
def test_batch_failure_paths_end_in_our_headline(flows, run_wf, dagster_home, params, said, item):
    _, batch, nodes = flows
    run = run_wf(batch, custom_nodes=[nodes], params={**WORKERS, **params})
    assert not run.success
    step_key, data = _step_failure(dagster_home, run.run_id)
    assert data.user_failure_data is not None, data.error.to_string()
    headline = data.user_failure_data.description
    assert headline.startswith("workflow 'batchfail', step 'Work' (node 2): ")
    assert said in headline
    meta = _meta(data)
    assert (meta["workflow"], meta["step"], meta["node"]) == ("batchfail", "Work", "2")
    if item is not None:
        assert meta["item_index"] == "0" and meta["note_index"] == str(item)
        assert meta["item"] == str(item)
        assert meta["note"] == f'{{"id": {item}, "items": [{item}]}}'
    assert run.failure.splitlines()[0] == f"{step_key}: {headline.splitlines()[0]}"


def test_item_failure_under_raise_says_how_to_skip_instead(flows, run_wf, dagster_home):
    """Under the default ``on_item_error: raise`` a bad item fails the run; its message says
    that ``skip`` and ``max_skipped_fraction`` exist and how to set them, and doing what it says
    runs the same items through."""
    _, batch, nodes = flows
    run = run_wf(batch, custom_nodes=[nodes], params={**WORKERS, "Work.load_error": 3})
    assert not run.success
    first = run.failure.splitlines()[0]
    assert "load_fn failed on item 3 (note 3, item 0): OSError: unreadable 3 (" in first
    assert "runtime.on_item_error: skip, with runtime.max_skipped_fraction" in first
    assert "--set Work.runtime.on_item_error=skip" in first
    said = {"Work.runtime.on_item_error": "skip", "Work.runtime.max_skipped_fraction": 0.5}
    skipped = run_wf(batch, custom_nodes=[nodes], params={**WORKERS, "Work.load_error": 3, **said})
    assert skipped.success, skipped.failure
    notes = skipped.notes["Work"]["out"]
    assert [n["id"] for n in notes] == list(range(6))  # every note released, in order
    assert notes[3]["graphbook_lost_items"] == [0]  # the bad item recorded as lost


def test_failure_headline_through_graphql(flows, tmp_path, dagster_home):
    """What the run page reads: the step failure event's error and its failure metadata."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    plain, _, nodes = flows
    location = tmp_path / "location.py"
    location.write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(plain)!r},"
        f" custom_nodes=[{str(nodes)!r}])])\n"
    )
    defs = build_definitions([GraphbookWorkflow(plain, custom_nodes=[nodes])], strict=True)
    config = {"ops": {"plainfail__Plain": {"config": {"bad": 3}}}}
    query = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
      __typename
      ... on ExecutionStepFailureEvent { stepKey error { message className }
        failureMetadata { description metadataEntries { label
          ... on TextMetadataEntry { text } ... on IntMetadataEntry { intValue } } } }
    } } } }"""
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("plainfail").execute_in_process(
            run_config=config, instance=instance, raise_on_error=False
        )
        assert not result.success
        with define_out_of_process_context(str(location), "defs", instance) as context:
            events = execute_dagster_graphql(context, query, {"id": result.run_id}).data[
                "logsForRun"
            ]["events"]
    (failure,) = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    assert failure["stepKey"] == "plainfail__Plain"
    assert failure["error"]["className"] == "StepFailure"
    assert failure["error"]["message"].startswith(
        "dagster_graphbook.execution.errors.StepFailure: workflow 'plainfail', step 'Plain' "
        "(node 2): failed on note 3"
    )
    described = failure["failureMetadata"]["description"]
    assert described.startswith("workflow 'plainfail', step 'Plain' (node 2): failed on note 3")
    entries = {
        e["label"]: e.get("text", e.get("intValue"))
        for e in failure["failureMetadata"]["metadataEntries"]
    }
    assert entries["step"] == "Plain" and entries["workflow"] == "plainfail"
    assert entries["note_index"] == "3" and entries["note"] == '{"id": 3, "items": [3]}'


def test_a_failed_items_note_and_item_indexes_read_as_text_as_the_headline_says(
    flows, tmp_path, dagster_home
):
    """A batch step whose load_fn raises on one item: every entry of the STEP_FAILURE event's
    metadata reads as text through GraphQL, the way a client asking each entry's text reads it,
    and the note and item indexes are the ones the headline names. Before, those two were the
    only int entries: such a client read ``note_index None, item_index None`` beside a headline
    saying ``(note 3, item 0)``."""
    import re

    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    _, batch, nodes = flows
    location = tmp_path / "location.py"
    location.write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions\n"
        f"defs = build_definitions([GraphbookWorkflow({str(batch)!r},"
        f" custom_nodes=[{str(nodes)!r}])])\n"
    )
    defs = build_definitions([GraphbookWorkflow(batch, custom_nodes=[nodes])], strict=True)
    runtime = {k.split(".", 2)[2]: v for k, v in WORKERS.items()}
    config = {"ops": {"batchfail__Work": {"config": {"load_error": 3, "runtime": runtime}}}}
    query = """query($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
      __typename
      ... on ExecutionStepFailureEvent { failureMetadata { description metadataEntries {
        __typename label ... on TextMetadataEntry { text } } } }
    } } } }"""
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("batchfail").execute_in_process(
            run_config=config, instance=instance, raise_on_error=False
        )
        assert not result.success
        with define_out_of_process_context(str(location), "defs", instance) as context:
            events = execute_dagster_graphql(context, query, {"id": result.run_id}).data[
                "logsForRun"
            ]["events"]
    (failure,) = [e for e in events if e["__typename"] == "ExecutionStepFailureEvent"]
    headline = failure["failureMetadata"]["description"]
    note, item = re.search(r"\(note (\d+), item (\d+)\)", headline).groups()
    assert (note, item) == ("3", "0"), headline
    entries = failure["failureMetadata"]["metadataEntries"]
    assert {e["__typename"] for e in entries} == {"TextMetadataEntry"}, entries
    texts = {e["label"]: e["text"] for e in entries}
    assert (texts["note_index"], texts["item_index"]) == (note, item), texts
    assert texts["stage"] == "load_fn" and texts["item"] == "3" and texts["step"] == "Work"


def test_errors_are_dagster_failures_and_keep_their_old_types():
    """``WorkflowError`` is still a ValueError and ``StepFailure`` a RuntimeError (callers catch
    them so); both are ``dg.Failure``s, and survive pickling (multiprocess executors)."""
    import pickle

    error = WorkflowError("wf.json", ["node 3: no such step"])
    assert isinstance(error, (ValueError, GraphbookError, dg.Failure))
    assert error.description.startswith("workflow wf.json is invalid")
    assert error.metadata["workflow"].value == "wf.json" and not error.allow_retries
    failure = StepFailure("workflow 'w', step 's' (node 1)", "boom")
    assert isinstance(failure, (RuntimeError, GraphbookError, dg.Failure))
    for original in (error, failure):
        copy = pickle.loads(pickle.dumps(original))
        assert type(copy) is type(original) and str(copy) == str(original)
        assert dict(copy.metadata) == dict(original.metadata)


def test_streaming_failure_headline_names_the_step_inside_the_segment(flows, run_wf, dagster_home):
    """All steps in one streaming op: the headline and metadata name the step that failed."""
    plain, _, nodes = flows
    run = run_wf(plain, custom_nodes=[nodes], params={"Plain.bad": 3}, streaming=True)
    assert not run.success
    _, data = _step_failure(dagster_home, run.run_id)
    assert data.user_failure_data is not None, data.error.to_string()
    headline = data.user_failure_data.description
    assert headline.startswith("workflow 'plainfail', step 'Plain' (node 2): ")
    assert "ValueError: cannot handle 3" in headline
    meta = _meta(data)
    assert (meta["workflow"], meta["step"], meta["node"]) == ("plainfail", "Plain", "2")


# Exception classes of the package that no user meets: each is raised and caught inside the
# package, as control flow, and never escapes it. (Private ``_X`` classes are not listed: they
# are internal by their name.)
INTERNAL = {
    "Unkeyable": "incremental keys: caught where a note or parameter is keyed; the note is "
    "computed every time, and the step's version says why",
    "Skipped": "image previews: caught by the preview maker; the image is listed as skipped, "
    "with why",
    "BatchNotReady": "loader pool: caught by its wait loop, which waits again",
}
# User errors that do not derive from the base yet. An entry fails this test once its class
# derives: then drop the entry.
PENDING: dict = {}


def _package_exceptions() -> dict:
    """``{qualified name: class}`` of every exception class defined in the package's modules
    (each module file imported; ``__main__`` runs the CLI, and defines none)."""
    import importlib
    from pathlib import Path

    import dagster_graphbook

    root = Path(dagster_graphbook.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        if path.name == "__main__.py":
            continue
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = importlib.import_module(name)
        classes = [v for v in vars(module).values() if isinstance(v, type)]
        classes += [v for c in classes for v in vars(c).values() if isinstance(v, type)]
        for cls in classes:
            if issubclass(cls, BaseException) and cls.__module__ == name:
                found[f"{name}.{cls.__qualname__}"] = cls
    return found


def test_every_error_a_user_can_meet_derives_from_graphbook_error():
    """One base for every error of the package a user can meet (``except GraphbookError``), the
    builtin bases callers catch kept beside it; the exemptions are listed, and still needed."""
    from dagster_graphbook.errors import RequestError
    from dagster_graphbook.execution.batch.decode import ImageDecodeError

    found = _package_exceptions()
    assert len(found) >= 10, sorted(found)  # the walk found the package's modules
    by_name = {cls.__name__: cls for cls in found.values()}
    listed = set(INTERNAL) | set(PENDING)
    assert listed <= set(by_name), f"exemptions of classes that are gone: {listed - set(by_name)}"
    stale = sorted(n for n in listed if issubclass(by_name[n], GraphbookError))
    assert not stale, f"these derive from GraphbookError now: drop their exemption: {stale}"
    outside = sorted(
        qualified
        for qualified, cls in found.items()
        if not cls.__name__.startswith("_")
        and not issubclass(cls, Warning)  # warned, not raised (UnboundResourceWarning)
        and cls.__name__ not in listed
        and not issubclass(cls, GraphbookError)
    )
    assert outside == [], f"user errors that do not derive from GraphbookError: {outside}"
    for cls, builtin in (
        (RequestError, ValueError),
        (WorkflowError, ValueError),
        (ImageDecodeError, ValueError),
        (StepFailure, RuntimeError),
    ):
        assert issubclass(cls, builtin), (cls, builtin)  # callers catch them so
