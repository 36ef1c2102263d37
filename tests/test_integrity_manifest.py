"""Stale outputs (issue 11.5): each materialization names exactly the files it wrote."""

from __future__ import annotations

import os

from conftest import edge, step_node, write_nodes, write_workflow

from dagster_graphbook.manifests import read_manifest

NODES = """
import os
from graphbook.steps import SourceStep, BatchStep

class Names(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"count": {"type": "number", "default": 3}}

    def __init__(self, count=3):
        super().__init__()
        self.count = int(count)

    def load(self):
        return {"out": [{"name": f"img_{i}"} for i in range(self.count)]}

class Save(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"out_dir": {"type": "string", "default": ""}}

    def __init__(self, out_dir=""):
        super().__init__(2, "name")
        self.out_dir = out_dir

    @staticmethod
    def dump_fn(name, folder):
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name + ".txt")
        with open(path, "w") as f:
            f.write(name)
        return path

    def on_item_batch(self, outputs, items, notes):
        return [(item, self.out_dir) for item in items]
"""


def test_the_latest_materialization_lists_exactly_its_own_files(tmp_path, run_wf, dagster_home):
    import dagster as dg

    nodes = write_nodes(tmp_path / "nodes", "save_nodes.py", NODES)
    out = tmp_path / "outputs"
    wf = write_workflow(
        tmp_path,
        "saver",
        [
            step_node("0", "Names", {"count": 5}, source=True),
            step_node("1", "Save", {"out_dir": str(out)}),
        ],
        [edge("0", "out", "1")],
    )
    first = run_wf(wf, [nodes], notes_dir=str(tmp_path / "notes"))
    second = run_wf(wf, [nodes], {"Names.count": 2}, notes_dir=str(tmp_path / "notes"))
    assert first.success and second.success
    on_disk = sorted(p.name for p in out.glob("*.txt"))
    assert on_disk == [f"img_{i}.txt" for i in range(5)]  # the first run's 3 extra files stay
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["saver", "Save"]))
    assert event.run_id == second.run_id
    manifest = event.asset_materialization.metadata["files_manifest"].value
    files = read_manifest(manifest)
    assert sorted(os.path.basename(p) for p in files) == ["img_0.txt", "img_1.txt"]
    assert all(os.path.isfile(p) for p in files)
