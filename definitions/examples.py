"""The example workflows, declared in Python (the nightly demo is declared in YAML:
nightly_shapes/defs.yaml).

Each workflow becomes a job, its steps assets (group = workflow name).
"""

from pathlib import Path

from dagster_graphbook import GraphbookWorkflow, build_definitions

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / "workflows"
NODES = ROOT / "custom_nodes"

defs = build_definitions(
    [
        GraphbookWorkflow(WORKFLOWS / "sample.json", custom_nodes=[NODES / "sample"]),
        GraphbookWorkflow(WORKFLOWS / "sample_graph.py", custom_nodes=[NODES / "sample"]),
        GraphbookWorkflow(
            WORKFLOWS / "simple_functional.json", custom_nodes=[NODES / "simple_functional"]
        ),
        GraphbookWorkflow(WORKFLOWS / "simple_class.json", custom_nodes=[NODES / "simple_class"]),
        GraphbookWorkflow(WORKFLOWS / "word_split.json", custom_nodes=[NODES / "word_split"]),
    ]
)
