"""Peak memory of the Batch Data guide's LoadImages -> a consumer, streaming vs one op per step.

Run by hand (not a test): ``.venv/bin/python benchmarks/bench_streaming.py [--sizes 200 2000]``.
Each run is a fresh child process running the workflow through Dagster (in-process executor);
the parent samples the RSS of the child and all its descendants (loader and dump workers) with
psutil and keeps the peak. The default mode also reports the notes it stored against the raw
tensor bytes (the target is <= 1.1). Prints a Markdown table.

``--endless N`` (heavy: run it once): a source of N small notes with a 1 KB payload, streamed
through a batch step into a sink that drops the payload and stores nothing, as a stream that
never ends; the run process prints its RSS every ``--every`` notes (target: flat within 50 MB
over a million notes). ``--stored-sink`` gives the sink an output pin, stored at the end: its
notes stay in memory until then, so RSS grows with them (a warning says so).
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


ENDLESS_NODES = """
import time

import psutil
from graphbook.steps import BatchStep, GeneratorSourceStep, Step


class Endless(GeneratorSourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {"n": {"type": "number", "default": 10}}

    def __init__(self, n=10):
        super().__init__()
        self.n = int(n)

    def load(self):
        for i in range(self.n):
            yield {"out": {"i": i, "items": [i], "payload": bytes(1000)}}


class Double(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {"batch_size": {"type": "number", "default": 16},
                  "item_key": {"type": "string", "default": "items"}}

    def __init__(self, batch_size=16, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        return 2 * item

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note["doubled"] = out


class DropPayload(Step):
    RequiresInput = True
    Outputs = []
    Parameters = {"every": {"type": "number", "default": 100000}}

    def __init__(self, every=100000):
        super().__init__()
        self.every, self.start = int(every), 0.0

    def on_data(self, note):
        note.pop("payload")
        if note["i"] == 0:
            self.start = time.perf_counter()
        if note["i"] % self.every == 0:
            rss = psutil.Process().memory_info().rss / 2**20
            seconds = time.perf_counter() - self.start
            print(f"RSS {note['i']} {seconds:.1f} {rss:.1f}", flush=True)


class DropPayloadStored(DropPayload):
    Outputs = ["out"]
"""


def endless(n: int, every: int, stored: bool) -> None:
    """The ``--endless`` mode (module docstring): RSS of the run process every ``every`` notes."""
    sink = "DropPayloadStored" if stored else "DropPayload"
    nodes = [
        ("src", "Endless", {"n": n}, []),
        ("dbl", "Double", {}, ["in"]),
        ("drop", sink, {"every": every}, ["in"]),
    ]
    spec = {
        "version": "0",
        "type": "workflow",
        "nodes": [
            {
                "id": i,
                "type": "step",
                "data": {
                    "name": name,
                    "parameters": {k: {"type": "number", "value": v} for k, v in params.items()},
                    "inputs": ins,
                    "outputs": ["out"] if i != "drop" or stored else [],
                },
            }
            for i, name, params, ins in nodes
        ],
        "edges": [
            {"id": f"e{k}", "source": s, "sourceHandle": "out", "target": t, "targetHandle": "in"}
            for k, (s, t) in enumerate([("src", "dbl"), ("dbl", "drop")])
        ],
    }
    child = """
import sys
from dagster_graphbook import run_workflow
params = {"Double.runtime.num_workers": 0, "Double.runtime.device": "cpu"}
run = run_workflow(sys.argv[1], [sys.argv[2]], params, dagster_home=sys.argv[3], streaming=True,
                   executor="in_process")
print("success" if run.success else f"failed: {run.failure}", flush=True)
"""
    with tempfile.TemporaryDirectory(prefix="bench_endless_") as tmp:
        folder = Path(tmp)
        (folder / "nodes").mkdir()
        (folder / "nodes" / "endless_nodes.py").write_text(ENDLESS_NODES)
        (folder / "home").mkdir()
        (folder / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        wf = folder / "endless.json"
        wf.write_text(json.dumps(spec))
        out = subprocess.run(
            [sys.executable, "-c", child, str(wf), str(folder / "nodes"), str(folder / "home")],
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        ).stdout
    rows = [line.split()[1:] for line in out.splitlines() if line.startswith("RSS ")]
    print(
        f"| notes | seconds | run process RSS ({'stored' if stored else 'storing-nothing'} sink) |"
    )
    print("| --- | --- | --- |")
    for notes, seconds, rss in rows:
        print(f"| {int(notes):,} | {seconds} | {rss} MB |")
    if rows:
        print(
            f"\nRSS growth over {int(rows[-1][0]):,} notes: "
            f"{float(rows[-1][2]) - float(rows[0][2]):+.1f} MB (target: within 50 MB)"
        )
    print(next((line for line in out.splitlines() if line.startswith(("success", "failed"))), out))


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
    parser.add_argument("--endless", type=int, default=0, help="notes of the endless mode")
    parser.add_argument("--every", type=int, default=100_000, help="notes between RSS lines")
    parser.add_argument("--stored-sink", action="store_true", help="the sink stores its notes")
    args = parser.parse_args()
    if args.endless:
        endless(args.endless, args.every, args.stored_sink)
        return
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
