"""Run settings, typed once: the launchpad's ``runtime`` block comes with its defaults."""

from __future__ import annotations

import pytest

from tests.support.paths import REPO


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
        # what Dagster's launchpad field refuses as a default failed the whole code location's
        # load naming nothing; what every run would refuse failed only at run time
        ({"retries": True}, "runtime of step IncomingImages: retries: expected int, got bool"),
        ({"max_skipped_fraction": "0.1"}, "runtime of step ClassifyShapes: max_skipped_fraction: "
         "expected float, got str '0.1'"),
        ({"num_workers": -1}, "runtime of step ClassifyShapes: num_workers: Input should be "
         "greater than or equal to 0"),
        ({"max_skipped_fraction": 5}, "max_skipped_fraction: Input should be less than or equal"),
        ({"retries": -3}, "retries: Input should be greater than or equal to 0"),
        ({"device": "gpu7"}, "runtime.device must be auto, cpu, cuda or cuda:N"),
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


def test_a_graph_runtime_typo_fails_the_load_as_the_workflow_option_does(tmp_path):
    """``g.runtime(on_item_eror="skip")`` (a typo) was dropped: every step stayed at raise."""
    from dagster_graphbook import WorkflowError

    flow = tmp_path / "typo_flow.py"
    flow.write_text(
        "from graphbook import Graph\nfrom nightly_nodes import IncomingImages\n\n"
        "g = Graph()\n\n\n@g()\ndef _():\n    g.step(IncomingImages)\n"
        "    g.runtime(on_item_eror='skip')\n"
    )
    with pytest.raises(WorkflowError, match="runtime names 'on_item_eror', which is neither"):
        _runtime_defaults(source=flow)


def test_a_class_two_steps_are_of_is_refused_as_a_runtime_or_set_key(tmp_path, wf_builders):
    """Two steps of class ``Plain``: ``runtime={"Plain": ...}`` and ``--set Plain.x`` reached
    only the first, silently; each now names both steps to choose from, and each step's own
    name works."""
    from dagster_graphbook import GraphbookWorkflow, WorkflowError, build_definitions
    from dagster_graphbook.defs.definitions import build_workflow
    from dagster_graphbook.runner.run_config import run_config_for

    b = wf_builders
    nodes = b["write_nodes"](
        tmp_path / "nodes",
        "plain_nodes.py",
        """
        from graphbook.steps import SourceStep, Step

        class Src(SourceStep):
            RequiresInput = False
            Outputs = ["out"]

            def load(self):
                return {"out": [{"i": 0}]}

        class Plain(Step):
            Parameters = {"x": {"type": "number", "default": 1}}

            def __init__(self, x=1):
                super().__init__()
                self.x = x
        """,
    )
    wf = b["write_workflow"](
        tmp_path,
        "two",
        [
            b["step_node"]("1", "Src", source=True),
            b["step_node"]("2", "Plain"),
            b["step_node"]("3", "Plain"),
        ],
        [b["edge"]("1", "out", "2"), b["edge"]("1", "out", "3")],
    )
    spec = GraphbookWorkflow(wf, custom_nodes=[nodes], runtime={"Plain": {"retries": 1}})
    with pytest.raises(WorkflowError, match=r"runtime names 'Plain', which several steps are"):
        build_definitions([spec], notes_dir=str(tmp_path / "notes"), strict=True)
    workflow = build_workflow(GraphbookWorkflow(wf, custom_nodes=[nodes])).workflow
    steps = [s for s in workflow.steps() if s.name == "Plain"]
    with pytest.raises(WorkflowError, match=r"'Plain' names several steps or resources"):
        run_config_for(workflow, {"Plain.x": 2})
    names = {s.id: s for s in steps}
    assert set(names) == {"2", "3"}
    config = run_config_for(workflow, {"2.x": 2, "3.x": 3})
    assert sorted(v["config"]["x"] for v in config["ops"].values()) == [2, 3]
