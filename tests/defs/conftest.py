"""What the tests of definitions share: the nightly demo as a YAML component."""

from __future__ import annotations

from tests.conftest import REPO

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
