"""Run settings, typed once: the launchpad's ``runtime`` block comes with its defaults."""

from __future__ import annotations

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
