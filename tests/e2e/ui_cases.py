"""A small code location for the UI tests: checks, progress lines, code versions, a broken file.

``make_ui_project(root)`` writes it under ``root`` (files the tests may edit, like a user would)
and returns the ``workspace.yaml`` that a real ``dagster-webserver`` serves as location
``ui_cases``:

- ``checked``: Items -> Slow (a batch step loading one item at a time, long enough to report
  progress) -> Score (reports ``accuracy``) -> After; a warning check ``row_count >= 1`` on
  Items and a blocking check ``accuracy >= 0.9`` on Score;
- ``versioned``: Items -> Tally, Tally's step in a file of its own, for edits;
- ``broken``: names a step no node file defines, so it loads as ``FAILED TO LOAD: ...``;
- ``forked``: one step, Where, writing how its process was started (which process forked it,
  with that one's command line) to ``forked_process.json`` beside the workflows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from tests.support.nodes import copy_nodes
from tests.support.paths import REPO
from tests.support.workflows import edge, step_node, write_workflow

LOCATION = "ui_cases"
BROKEN_STEP = "NoSuchStep"


LOCATION_PY = """
from dagster_graphbook import GraphbookWorkflow, StepCheck, build_definitions

ROOT = {root!r}
NODES = [ROOT + "/nodes", ROOT + "/nodes_edit"]
CHECKS = [
    StepCheck(step="Items", metric="row_count", min=1, severity="warn"),
    StepCheck(step="Score", metric="accuracy", min=0.9, severity="blocking"),
]
defs = build_definitions(
    [
        GraphbookWorkflow(ROOT + "/checked.json", custom_nodes=NODES, checks=CHECKS),
        GraphbookWorkflow(ROOT + "/versioned.json", custom_nodes=NODES),
        GraphbookWorkflow(ROOT + "/broken.json", custom_nodes=NODES),
        GraphbookWorkflow(ROOT + "/forked.json", custom_nodes=NODES),
    ],
    notes_dir=ROOT + "/notes",
)
"""


def make_ui_project(root: Path, *, with_repository: bool = False) -> Path:
    """Write the location's node files, workflows and workspace under ``root``; return the
    workspace file. ``with_repository`` also serves the repository's own location
    (``graphbook``, as ``workspace.yaml`` does), for one webserver showing both."""
    root.mkdir(parents=True, exist_ok=True)
    copy_nodes(root / "nodes", "ui_nodes.py", "ui_steps")
    copy_nodes(root / "nodes_edit", "edit_nodes.py", "ui_edits")
    write_workflow(
        root,
        "checked",
        [
            step_node("1", "Items", {"n": 12}, source=True),
            step_node("2", "Slow", {"batch_size": 2, "item_key": "items"}),
            step_node("3", "Score", {"score": 0.95}),
            step_node("4", "After", {"marker": str(root / "after.txt")}),
        ],
        [edge("1", "out", "2"), edge("2", "out", "3"), edge("3", "out", "4")],
    )
    write_workflow(
        root,
        "versioned",
        [step_node("1", "Items", {"n": 4}, source=True), step_node("2", "Tally", {"scale": 1})],
        [edge("1", "out", "2")],
    )
    write_workflow(
        root,
        "broken",
        [step_node("1", "Items", {"n": 2}, source=True), step_node("2", BROKEN_STEP)],
        [edge("1", "out", "2")],
    )
    write_workflow(
        root,
        "forked",
        [step_node("1", "Where", {"record": str(root / "forked_process.json")}, source=True)],
        [],
    )
    (root / "location.py").write_text(LOCATION_PY.format(root=str(root)))
    workspace = root / "workspace.yaml"
    workspace.write_text(
        "load_from:\n"
        "  - python_file:\n"
        f"      relative_path: {root / 'location.py'}\n"
        f"      working_directory: {root}\n"
        f"      location_name: {LOCATION}\n"
    )
    if with_repository:
        with workspace.open("a") as f:
            f.write(
                "  - autoload_defs_module:\n"
                "      module_name: definitions\n"
                f"      working_directory: {REPO}\n"
                "      location_name: graphbook\n"
            )
    return workspace


def set_param(workflow: Path, node_id: str, param: str, value: Any) -> None:
    """Edit one parameter value in a workflow file, as Graphbook's editor saves it."""
    data = json.loads(workflow.read_text())
    node = next(n for n in data["nodes"] if n["id"] == node_id)
    node["data"]["parameters"][param]["value"] = value
    workflow.write_text(json.dumps(data, indent=2))


def checked_config(*, score: float) -> Dict[str, Any]:
    """Launchpad config for ``checked``: Score's value, and Slow's progress every 0.5 s."""
    return {
        "ops": {
            "checked__Slow": {
                "config": {"runtime": {"num_workers": 0, "progress_interval_s": 0.5}}
            },
            "checked__Score": {"config": {"score": score}},
        }
    }
