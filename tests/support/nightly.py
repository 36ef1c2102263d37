"""The nightly shapes demo (examples/nightly/): its data generator, the days the tests generate,
and the demo as a YAML component."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.support.paths import EXAMPLES, REPO

DAYS = ("2026-03-01", "2026-03-02", "2026-03-03")  # the nightly project's generated days
PER_DAY = 48
NIGHTLY_DAY = "2025-06-01"  # a partition of the demo job (daily from 2025-01-01)


def shapes_data() -> ModuleType:
    """examples/nightly/shapes_data.py, imported under a name of its own."""
    spec = importlib.util.spec_from_file_location(
        "nightly_shapes_data_under_test", EXAMPLES / "shapes_data.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NIGHTLY_YAML = f"""
    type: dagster_graphbook.GraphbookWorkflowComponent
    attributes:
      workflow: {REPO}/workflows/nightly_shapes.json
      custom_nodes: [{REPO}/custom_nodes/nightly]
      partitions: {{start_date: "2026-01-01"}}
      schedule_hour: 3
      sensor_folder: incoming
      sensor_asset: nightly_shapes/incoming
      external_deps: {{IncomingImages: [nightly_shapes/incoming]}}
      op_tags: {{team: vision}}
      job_tags: {{owner: ml}}
"""
