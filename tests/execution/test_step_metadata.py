"""What the UI shows of each asset: per-pin descriptions in Markdown, per-pin counts,
and materializations that carry only what a user reads and plots, the constants once on the
definition. A small workflow (source -> batch step -> step with three pins) runs on a real
instance; everything is read back from the instance's materialization events."""

from __future__ import annotations

import pickle
import re

import dagster as dg
import pandas as pd
import pytest

from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, step_node, write_workflow

N = 7
PINS = {"even": 4, "odd": 3, "other": 0}
K = lambda *path: dg.AssetKey(["pins", *path])  # noqa: E731
RST = re.compile(r"``|:[a-z]+:`")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The workflow built and run once on a real instance; its definitions and materializations."""
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    tmp = tmp_path_factory.mktemp("asset_metadata")
    nodes = copy_nodes(tmp / "nodes", "meta_nodes.py", "step_metadata")
    steps = [
        step_node("n", "Numbers", {"n": N}, source=True),
        step_node("s", "Scale", {"batch_size": 3, "item_key": "items"}),
        step_node("p", "Parity", {}, outputs=list(PINS)),
    ]
    edges = [edge("n", "out", "s"), edge("s", "out", "p")]
    path = write_workflow(tmp, "pins", steps, edges)
    defs = build_definitions(
        [GraphbookWorkflow(path, custom_nodes=[nodes])], notes_dir=str(tmp / "notes")
    )
    home = tmp / "home"
    home.mkdir()
    runtime = {"runtime": {"num_workers": 0}}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        result = defs.resolve_job_def("pins").execute_in_process(
            instance=instance, run_config={"ops": {"pins__Scale": {"config": runtime}}}
        )
        assert result.success
        mats = {
            r.asset_materialization.asset_key: r.asset_materialization.metadata
            for r in instance.all_logs(
                result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            )
        }
    specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
    return {"defs": defs, "mats": mats, "specs": specs, "workflow": str(path)}


def test_each_pin_counts_its_own_notes_as_stored(ran):
    for pin, count in PINS.items():
        meta = ran["mats"][K("Parity", pin)]
        with open(meta["dagster/uri"].value, "rb") as f:
            stored = pickle.load(f)
        assert meta["dagster/row_count"].value == len(stored) == count
        assert {n["i"] % 2 for n in stored} <= ({0} if pin == "even" else {1})
        # nothing beside it counts the step's other pins
        assert not {"notes_out", "notes", "notes_failed"} & set(meta)
    assert ran["mats"][K("Parity", "even")]["notes_in"].value == N


def test_pin_descriptions_say_what_goes_to_each_pin_in_markdown(ran):
    specs = ran["specs"]
    even, odd, other = (specs[K("Parity", pin)].description for pin in PINS)
    assert len({even, odd, other}) == 3
    head = "Sends each note to a pin by the parity of `i` (see `Numbers`)."
    assert even == f"{head}\n\nNotes sent to pin `even`: notes whose `i` is even"
    assert odd == f"{head}\n\nNotes sent to pin `odd`: notes whose `i` is odd"
    assert other == f"{head}\n\nNotes sent to pin `other`."
    scale = specs[K("Scale")].description
    assert scale == "Multiplies each item by ten in `load_fn` (a `BatchStep`)."
    source = specs[K("Numbers")].description
    assert source == 'Yields `n` notes `{"i": i, "items": [i]}`.'
    op_description = ran["defs"].resolve_assets_def(K("Parity", "even")).op.description
    assert "**Outputs**" in op_description and "- **odd**: notes whose `i` is odd" in op_description
    for text in (even, odd, other, scale, source, op_description):
        assert not RST.search(text), text


def test_constants_are_one_definition_entry_not_on_materializations(ran):
    for key, spec in ran["specs"].items():
        info = spec.metadata["graphbook"].value
        pin = key.path[-1] if len(key.path) == 3 else "out"
        assert info["workflow"] == ran["workflow"] and info["pin"] == pin
        assert {"node_id", "class", "step_kind", "sink", "params"} <= set(info)
        assert not [
            k
            for k in spec.metadata
            if k.startswith("dagster_graphbook/") and k != "dagster_graphbook/notes_dir"
        ]
    assert ran["specs"][K("Parity", "odd")].metadata["graphbook"].value["sink"] is True
    assert ran["specs"][K("Scale")].metadata["graphbook"].value["params"]["batch_size"] == 3
    for meta in ran["mats"].values():
        assert "graphbook" not in meta and not [k for k in meta if "dagster_graphbook" in k]
        texts = [str(v.value) for v in meta.values() if isinstance(v, dg.TextMetadataValue)]
        assert not {ran["workflow"], "Parity", "Scale", "Numbers"} & set(texts)


def _numeric(meta):
    return {
        k for k, v in meta.items() if isinstance(v, (dg.IntMetadataValue, dg.FloatMetadataValue))
    }


def test_plotted_entries_are_the_meaningful_figures(ran):
    mats = ran["mats"]
    common = {"dagster/row_count", "seconds", "errors_skipped"}
    assert _numeric(mats[K("Numbers")]) == common
    assert _numeric(mats[K("Parity", "odd")]) == common | {"notes_in"}
    batch = {"notes_in", "items", "items_per_s", "loader_wait_s", "on_item_batch_s"}
    assert _numeric(mats[K("Scale")]) == common | batch
    scale = mats[K("Scale")]
    assert scale["items"].value == N and scale["notes_in"].value == N
    # the run's settings are read, not plotted: one JSON entry
    details = scale["details"].value
    assert details["num_workers"] == 0 and details["batches"] == 3 and "device" in details
    # a sink pin that makes a table: schema and a preview of its first rows
    odd = mats[K("Parity", "odd")]
    assert [c.name for c in odd["dagster/column_schema"].value.columns] == ["i", "items", "scaled"]
    preview = odd["preview"].value  # a table the UI renders: the first rows, as text
    assert [c.name for c in preview.schema.columns] == ["i", "items", "scaled"]
    rows = pd.read_parquet(odd["table_path"].value).head(5).astype(str)
    assert [r.data for r in preview.records] == rows.to_dict("records")
    assert len(odd) <= 9 and len(scale) <= 11, (sorted(odd), sorted(scale))


def test_streamed_pins_count_their_own_notes_too(tmp_path):
    """Streaming mode: pins read inside the stream store nothing but still count their notes."""
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    nodes = copy_nodes(tmp_path / "nodes", "meta_nodes.py", "step_metadata")
    steps = [
        step_node("n", "Numbers", {"n": N}, source=True),
        step_node("p", "Parity", {}, outputs=list(PINS)),
    ]
    path = write_workflow(tmp_path, "streamed", steps, [edge("n", "out", "p")])
    workflow = GraphbookWorkflow(path, custom_nodes=[nodes], streaming=True)
    defs = build_definitions([workflow], notes_dir=str(tmp_path / "notes"))
    (tmp_path / "home").mkdir()
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        result = defs.resolve_job_def("streamed").execute_in_process(instance=instance)
        assert result.success
        mats = {
            r.asset_materialization.asset_key.to_user_string(): r.asset_materialization.metadata
            for r in instance.all_logs(
                result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            )
        }
    counts = {key: meta["dagster/row_count"].value for key, meta in mats.items()}
    assert counts == {"streamed/Numbers": N, **{f"streamed/Parity/{p}": n for p, n in PINS.items()}}
    assert "dagster/uri" not in mats["streamed/Numbers"]  # read inside the stream: not stored
    for pin, count in PINS.items():
        with open(mats[f"streamed/Parity/{pin}"]["dagster/uri"].value, "rb") as f:
            assert len(pickle.load(f)) == count
    common = {"dagster/row_count", "seconds", "errors_skipped", "max_notes_queued"}
    assert _numeric(mats["streamed/Numbers"]) == common  # a source reads no notes
    assert _numeric(mats["streamed/Parity/odd"]) == common | {"notes_in"}


def test_get_pin_description_is_the_hook_for_pin_assets(tmp_path):
    from dagster_graphbook import GraphbookTranslator, GraphbookWorkflow, build_definitions

    class PinOnly(GraphbookTranslator):
        def get_pin_description(self, workflow, node, pin):
            return f"{node.name} -> {pin}"

    nodes = copy_nodes(tmp_path / "nodes", "meta_nodes.py", "step_metadata")
    steps = [
        step_node("n", "Numbers", {"n": 2}, source=True),
        step_node("p", "Parity", {}, outputs=list(PINS)),
    ]
    path = write_workflow(tmp_path, "hook", steps, [edge("n", "out", "p")])
    defs = build_definitions([GraphbookWorkflow(path, custom_nodes=[nodes])], translator=PinOnly())
    described = {s.key.to_user_string(): s.description for s in defs.resolve_all_asset_specs()}
    assert described == {
        "hook/Numbers": "Numbers -> out",
        **{f"hook/Parity/{pin}": f"Parity -> {pin}" for pin in PINS},
    }
