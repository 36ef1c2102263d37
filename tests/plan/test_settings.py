"""Run settings, typed once: the launchpad's ``runtime`` block comes with its defaults."""

from __future__ import annotations

import pytest

from tests.conftest import REPO


def test_launchpad_config_shows_the_runtime_block_with_its_defaults():
    """The Launchpad scaffolds a step's config from the schema's defaults: ``runtime`` must have
    one, or its settings (workers, device, on_item_error, timeouts) stay hidden."""
    import dagster as dg

    from dagster_graphbook import GraphbookWorkflow, build_definitions

    root = REPO
    defs = build_definitions(
        [
            GraphbookWorkflow(
                root / "workflows/nightly_shapes.json", custom_nodes=[root / "custom_nodes/nightly"]
            )
        ]
    )
    job = defs.resolve_job_def("nightly_shapes")
    config = dg.validate_run_config(job, {})
    runtime = config["ops"]["nightly_shapes__ClassifyShapes"]["config"]["runtime"]
    assert runtime["num_workers"] == 2 and runtime["device"] == "auto"
    assert runtime["on_item_error"] == "raise"
    assert config["ops"]["nightly_shapes__ReviewSplit"]["config"]["runtime"]["retries"] == 0


def _runtime_defaults(runtime=None, source=None):
    """The launchpad's runtime block of each step of the nightly demo built with ``runtime=``."""
    import dagster as dg

    from dagster_graphbook import GraphbookWorkflow, build_definitions

    spec = GraphbookWorkflow(
        source or REPO / "workflows/nightly_shapes.json",
        custom_nodes=[REPO / "custom_nodes/nightly"],
        runtime=runtime,
    )
    job = build_definitions([spec], strict=True).jobs[0]
    config = dg.validate_run_config(job, {})  # what a schedule's run without config gets
    return {
        op.removeprefix("nightly_shapes__"): body["config"]["runtime"]
        for op, body in config["ops"].items()
    }


def test_a_workflows_runtime_setting_is_what_every_step_that_has_it_starts_from():
    """``runtime={"on_item_error": "skip", "num_workers": 3}``: every step skips bad items by
    default, and the batch step (the only one with workers) gets 3 workers; a step named as a key
    gets its own settings over the workflow-wide ones; a run's config still changes them."""
    import dagster as dg

    defaults = _runtime_defaults(
        {"on_item_error": "skip", "num_workers": 3, "ClassifyShapes": {"on_item_error": "raise"}}
    )
    assert {s: r["on_item_error"] for s, r in defaults.items()} == {
        "IncomingImages": "skip",
        "ClassifyShapes": "raise",
        "ReviewSplit": "skip",
        "SaveResized": "skip",
    }
    assert defaults["ClassifyShapes"]["num_workers"] == 3
    assert defaults["SaveResized"]["num_workers"] == 3
    assert "num_workers" not in defaults["ReviewSplit"]
    assert _runtime_defaults()["ReviewSplit"]["on_item_error"] == "raise"  # the settings' own

    from dagster_graphbook import GraphbookWorkflow, build_definitions

    job = build_definitions(
        [
            GraphbookWorkflow(
                REPO / "workflows/nightly_shapes.json",
                custom_nodes=[REPO / "custom_nodes/nightly"],
                runtime={"on_item_error": "skip"},
            )
        ]
    ).jobs[0]
    op = "nightly_shapes__ReviewSplit"
    config = dg.validate_run_config(
        job, {"ops": {op: {"config": {"runtime": {"on_item_error": "raise"}}}}}
    )
    assert config["ops"][op]["config"]["runtime"]["on_item_error"] == "raise"


@pytest.mark.parametrize(
    "runtime, said",
    [
        ({"on_item_error": "skipp"}, "runtime of step IncomingImages: on_item_error: Input "),
        ({"ReviewSplit": {"num_workers": 2}}, "runtime['ReviewSplit'] (step ReviewSplit) sets "
         "'num_workers', a batch step's setting, but it is not a batch step"),
        ({"Nope": {"retries": 1}}, "runtime names 'Nope', which is neither a runtime setting"),
        ({"ClassifyShapes": {"shards": 2}}, "a workflow shards a step with shards="),
        ({"shard_size": 10}, "runtime sets 'shard_size': a workflow shards a step with shards="),
        ({"ClassifyShapes": {"workers": 2}}, "sets 'workers', which is not a runtime setting"),
        ({"ClassifyShapes": 4}, "must be a mapping of setting -> value, got 4"),
        ({"ClassifyShapes": {"max_skipped_fraction": "lots"}}, "runtime of step ClassifyShapes: "
         "max_skipped_fraction:"),
    ],
)  # fmt: skip
def test_a_runtime_setting_no_step_can_take_fails_the_load_naming_the_step(runtime, said):
    """A typo in a setting or its value would otherwise surface only at 2 a.m., in the first
    scheduled run: it is a load error naming the workflow and the step."""
    from dagster_graphbook import WorkflowError

    with pytest.raises(WorkflowError) as caught:
        _runtime_defaults(runtime)
    assert said in str(caught.value) and "nightly_shapes.json" in str(caught.value)


def test_a_graph_sets_its_steps_runtime_and_the_workflow_option_wins(tmp_path):
    """``g.runtime(...)`` (every step) and ``node.runtime(...)`` (one step) in a Python Graph are
    what its runs start from; ``GraphbookWorkflow(runtime=)`` over them."""
    flow = tmp_path / "nightly_shapes.py"
    flow.write_text(
        "from graphbook import Graph\n"
        "from nightly_nodes import ClassifyShapes, IncomingImages, ReviewSplit, SaveResized, "
        "ShapesModel\n\n"
        "g = Graph()\n\n\n@g()\ndef _():\n"
        "    model = g.resource(ShapesModel)\n"
        "    images = g.step(IncomingImages)\n"
        "    classify = g.step(ClassifyShapes).runtime(num_workers=1, on_item_error='raise')\n"
        "    classify.param('model', model)\n"
        "    classify.bind(images)\n"
        "    review = g.step(ReviewSplit)\n"
        "    review.bind(classify)\n"
        "    save = g.step(SaveResized)\n"
        "    save.bind(review, 'confident')\n"
        "    g.runtime(on_item_error='skip', retries=2)\n"
    )
    defaults = _runtime_defaults(source=flow)
    assert defaults["ClassifyShapes"]["num_workers"] == 1
    assert defaults["ClassifyShapes"]["on_item_error"] == "raise"
    assert defaults["ReviewSplit"]["on_item_error"] == "skip"
    assert {r["retries"] for r in defaults.values()} == {2}
    over = _runtime_defaults({"ClassifyShapes": {"num_workers": 4}}, source=flow)
    assert over["ClassifyShapes"]["num_workers"] == 4
    assert over["ClassifyShapes"]["on_item_error"] == "raise"  # the Graph's, not replaced
