"""Peak memory of the Batch Data guide's LoadImages -> a consumer, streaming vs one op per step.

Run by hand (not a test): ``.venv/bin/python benchmarks/bench_streaming.py [--sizes 200 2000]``.
Each run is a fresh child process running the workflow through Dagster (in-process executor);
the parent samples the RSS of the child and all its descendants (loader and dump workers) with
psutil and keeps the peak. The default mode also reports the notes it stored against the raw
tensor bytes (the target is <= 1.1). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from imageset import make_image_set  # noqa: E402

SIZE = 224
# The guide's LoadImages (class form, unchanged) and a consumer that reduces each tensor.
NODES = """
from typing import List

import torch
import torchvision.transforms.functional as F
from PIL import Image
from graphbook import param, source, step
from graphbook.steps import BatchStep, Step


class LoadImages(BatchStep):
    RequiresInput = True
    Parameters = {
        "batch_size": {"type": "number", "default": 8},
        "item_key": {"type": "string", "default": "image_paths"}
    }
    Outputs = ["out"]
    Category = ""

    def __init__(self, batch_size, item_key):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item: dict) -> torch.Tensor:
        image_path = item["value"]
        pil_image = Image.open(image_path)
        return F.to_tensor(pil_image)

    @staticmethod
    def on_item_batch(tensors: List[torch.Tensor], items: List[dict], data: List[dict]):
        for tensor, d in zip(tensors, data):
            if d["tensor"] is None:
                d["tensor"] = []
            d["tensor"].append(tensor)


@step("Images")
@source()
@param("listing", "string", default="")
def images(ctx):
    with open(ctx.listing) as f:
        for line in f:
            item = {"value": line.strip(), "type": "image"}
            yield {"out": {"image_paths": [item], "tensor": None}}


class Reduce(Step):
    RequiresInput = True
    Parameters = {}
    Outputs = ["out"]
    Category = ""

    def on_data(self, data):
        data["mean"] = float(sum(t.mean() for t in data.pop("tensor")))
"""

CHILD = """
import json, os, sys
import dagster as dg
from dagster_graphbook import run_workflow

wf, nodes, home, streaming = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
params = {"LoadImages.runtime.num_workers": 2, "LoadImages.runtime.device": "cpu"}
with dg.DagsterInstance.from_config(home) as instance:
    run = run_workflow(wf, [nodes], params, instance=instance, streaming=streaming)
    stored = 0
    for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = record.asset_materialization
        if "dagster/uri" in m.metadata and m.asset_key.path[-1] == "LoadImages":
            stored += os.path.getsize(str(m.metadata["dagster/uri"].value))
print(json.dumps({"success": run.success, "failure": run.failure, "seconds": run.seconds,
                  "stored": stored,
                  "notes": len(run["Reduce"]["out"]) if run.success else 0}))
"""


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _workflow(folder: Path, listing: Path) -> Path:
    nodes = [
        {
            "id": "src",
            "type": "step",
            "data": {
                "name": "Images",
                "parameters": {"listing": {"type": "string", "value": str(listing)}},
                "inputs": [],
                "outputs": ["out"],
            },
        },
        {
            "id": "load",
            "type": "step",
            "data": {
                "name": "LoadImages",
                "label": "LoadImages",
                "parameters": {},
                "inputs": ["in"],
                "outputs": ["out"],
            },
        },
        {
            "id": "reduce",
            "type": "step",
            "data": {"name": "Reduce", "parameters": {}, "inputs": ["in"], "outputs": ["out"]},
        },
    ]
    edges = [
        {"id": f"e{i}", "source": s, "sourceHandle": "out", "target": t, "targetHandle": "in"}
        for i, (s, t) in enumerate([("src", "load"), ("load", "reduce")])
    ]
    path = folder / "images.json"
    path.write_text(
        json.dumps({"version": "0", "type": "workflow", "nodes": nodes, "edges": edges})
    )
    return path


def measure(n: int, streaming: bool, image_root: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_streaming_") as tmp:
        folder = Path(tmp)
        listing = folder / "images.txt"
        listing.write_text("\n".join(make_image_set(image_root, n, SIZE)) + "\n")
        nodes = folder / "nodes"
        nodes.mkdir()
        (nodes / "guide_nodes.py").write_text(textwrap.dedent(NODES))
        home = folder / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        wf = _workflow(folder, listing)
        env = {**os.environ, "DAGSTER_HOME": str(home)}
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                str(wf),
                str(nodes),
                str(home),
                "1" if streaming else "0",
            ],
            stdout=subprocess.PIPE,
            env=env,
        )
        proc, peak = psutil.Process(child.pid), 0
        while child.poll() is None:
            peak = max(peak, _tree_rss(proc))
            time.sleep(0.05)
        result = json.loads(child.stdout.read().decode().strip().splitlines()[-1])
        if not result["success"]:
            raise SystemExit(f"run failed: {result['failure']}")
        result["peak_rss"] = peak
        result["raw"] = n * 3 * SIZE * SIZE * 4
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[200, 2000], help="images per run (streaming)"
    )
    parser.add_argument(
        "--default-sizes",
        type=int,
        nargs="+",
        default=[200],
        help="images per run in the default mode",
    )
    parser.add_argument(
        "--images",
        default=os.path.join(tempfile.gettempdir(), "graphbook_bench_images"),
        help="image cache folder",
    )
    args = parser.parse_args()
    rows = []
    for n in args.default_sizes:
        rows.append(("default", n, measure(n, False, Path(args.images))))
    for n in args.sizes:
        rows.append(("streaming", n, measure(n, True, Path(args.images))))
    print(
        "| mode | images | peak RSS (tree) | seconds | notes stored (LoadImages pin) "
        "| stored / raw tensor bytes |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for mode, n, r in rows:
        ratio = f"{r['stored'] / r['raw']:.3f}" if r["stored"] else "not stored"
        print(
            f"| {mode} | {n:,} | {r['peak_rss'] / 1e9:.2f} GB | {r['seconds']:.1f} "
            f"| {r['stored'] / 1e9:.3f} GB | {ratio} |"
        )
    streamed = {n: r["peak_rss"] for mode, n, r in rows if mode == "streaming"}
    if len(streamed) >= 2:
        small, large = min(streamed), max(streamed)
        print(
            f"\nstreaming peak RSS {large} / {small} images: "
            f"{streamed[large] / streamed[small]:.2f}x (target <= 1.3x)"
        )


if __name__ == "__main__":
    main()
