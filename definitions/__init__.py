"""The Dagster code location of this repository (``workspace.yaml`` loads it).

Each example workflow becomes a job, its steps assets (group = workflow name). The nightly demo
(``workflows/nightly_shapes.json``) is daily-partitioned, with a nightly schedule for the previous
day, a sensor for new dated folders in ``data/incoming/`` and that folder as an upstream asset.
"""

from pathlib import Path

from dagster_graphbook import GraphbookWorkflow, build_definitions
from dagster_graphbook.schedules import FolderSensor, daily_partitions

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / "workflows"
NODES = ROOT / "custom_nodes"
INCOMING = ROOT / "data" / "incoming"

nightly_shapes = GraphbookWorkflow(
    WORKFLOWS / "nightly_shapes.json",
    custom_nodes=[NODES / "nightly"],
    partitions_def=daily_partitions("2025-01-01"),
    schedule_hour=2,  # 02:00 UTC: yesterday's partition
    external_deps={"IncomingImages": [["nightly_shapes", "incoming"]]},
    sensor=FolderSensor(INCOMING),
)

defs = build_definitions([
    nightly_shapes,
    GraphbookWorkflow(WORKFLOWS / "sample.json", custom_nodes=[NODES / "sample"]),
    GraphbookWorkflow(WORKFLOWS / "sample_graph.py", custom_nodes=[NODES / "sample"]),
    GraphbookWorkflow(WORKFLOWS / "simple_functional.json", custom_nodes=[NODES / "simple_functional"]),
    GraphbookWorkflow(WORKFLOWS / "simple_class.json", custom_nodes=[NODES / "simple_class"]),
    GraphbookWorkflow(WORKFLOWS / "word_split.json", custom_nodes=[NODES / "word_split"]),
])
