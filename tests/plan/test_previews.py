"""Image preview settings (``plan/previews.py``): per workflow and per step, in Python and YAML,
checked when the workflow loads."""

from __future__ import annotations

import traceback

import pytest

from dagster_graphbook import GraphbookWorkflow, WorkflowError, build_definitions
from dagster_graphbook.defs.definitions import load
from dagster_graphbook.plan.previews import OFF, PreviewSettings
from tests.support.defs_folder import load_defs_folder
from tests.support.paths import REPO

NIGHTLY = REPO / "workflows" / "nightly_shapes.json"
NODES = [REPO / "custom_nodes" / "nightly"]


def _by_step(setting) -> dict:
    workflow = load(GraphbookWorkflow(NIGHTLY, custom_nodes=NODES, preview=setting))
    return {workflow.nodes[node_id].name: value for node_id, value in workflow.previews.items()}


def test_every_step_previews_with_the_defaults_unless_told_otherwise():
    assert _by_step(None) == {} == _by_step(True)  # StepPlan's default: PreviewSettings()
    assert PreviewSettings() == PreviewSettings(max=12, size=96)
    off = _by_step(False)
    assert set(off) == {"IncomingImages", "ClassifyShapes", "ReviewSplit", "SaveResized"}
    assert set(off.values()) == {OFF} and not OFF.on


def test_workflow_settings_with_per_step_overrides():
    got = _by_step(
        {
            "max": 4,
            "size": 64,
            "ClassifyShapes": False,
            "ReviewSplit": {"caption": ["label", "confidence"]},
            "SaveResized": True,
        }
    )
    assert got["IncomingImages"] == PreviewSettings(max=4, size=64)
    assert got["ClassifyShapes"] == OFF
    assert got["ReviewSplit"] == PreviewSettings(max=4, size=64, caption=("label", "confidence"))
    assert got["SaveResized"] == PreviewSettings(max=4, size=64)
    # off for the workflow, on for one step
    got = _by_step({"max": 0, "ReviewSplit": {"size": 48}})
    assert got["ReviewSplit"] == PreviewSettings(size=48) and got["SaveResized"] == OFF


def test_the_field_shown_and_the_bounds_are_settings():
    defaults = PreviewSettings()
    assert (defaults.field, defaults.timeout_s, defaults.image_timeout_s) == ("", 10.0, 3.0)
    assert defaults.max_megapixels == 50.0
    got = _by_step({"timeout_s": 4, "SaveResized": {"field": "image", "max_megapixels": 8}})
    assert got["SaveResized"] == PreviewSettings(field="image", timeout_s=4.0, max_megapixels=8.0)
    assert got["ReviewSplit"] == PreviewSettings(timeout_s=4.0)


@pytest.mark.parametrize(
    "setting, says",
    [
        ({"Nope": False}, "preview names step 'Nope', which is not in the workflow"),
        ({"max": -1}, "preview.max must be a whole number from 0 to 256, got -1"),
        ({"max": 1000}, "preview.max must be a whole number from 0 to 256, got 1000"),
        ({"size": 2}, "preview.size must be a whole number from 8 to 1024, got 2"),
        ({"ReviewSplit": {"colour": 1}}, "preview['ReviewSplit'] has unknown keys ['colour']"),
        ({"ReviewSplit": 3}, "preview['ReviewSplit'] must be true, false or a mapping, got 3"),
        ("yes", "preview must be true, false or a mapping"),
        ({"field": ""}, "preview.field must be a note field's name, got ''"),
        ({"image_timeout_s": 0}, "preview.image_timeout_s must be a number above 0, got 0"),
        ({"ReviewSplit": {"timeout_s": "5"}}, "preview['ReviewSplit'].timeout_s must be a number"),
    ],
)
def test_bad_settings_fail_at_load_naming_the_setting(setting, says):
    with pytest.raises(WorkflowError, match="nightly_shapes") as raised:
        build_definitions(
            [GraphbookWorkflow(NIGHTLY, custom_nodes=NODES, preview=setting)], strict=True
        )
    assert says in str(raised.value)


def test_the_yaml_component_takes_preview(tmp_path, monkeypatch):
    yaml = f"""
        type: dagster_graphbook.GraphbookWorkflowComponent
        attributes:
          workflow: {NIGHTLY}
          custom_nodes: [{NODES[0]}]
          preview: {{max: 3, Nope: false}}
    """
    monkeypatch.setenv("DAGSTER_GRAPHBOOK_STRICT", "1")  # a load error raises (dg check defs)
    for folder in ("bad", "good"):
        (tmp_path / folder).mkdir()
    with pytest.raises(Exception) as raised:
        load_defs_folder(tmp_path / "bad", "preview_bad", {"nightly": yaml})
    chain = "".join(traceback.format_exception(raised.value))  # Dagster wraps the load error
    assert "preview names step 'Nope'" in chain
    good = yaml.replace("Nope: false", "ClassifyShapes: false")
    defs = load_defs_folder(tmp_path / "good", "preview_good", {"nightly": good})
    assert defs.resolve_job_def("nightly_shapes") is not None
