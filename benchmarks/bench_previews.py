"""By-hand benchmark: what image previews cost the nightly demo, per step and per run.

    .venv/bin/python benchmarks/bench_previews.py [--images 300] [--rounds 5]

Not a test. Makes a day of images and a briefly trained checkpoint with the demo's own scripts
in a temporary folder, then runs that day of ``workflows/nightly_shapes.json`` in process,
interleaved: previews on (the default), off (``preview=False``), on, off, ... Each step's wall
time is its STEP_START to STEP_SUCCESS in the event log (the thumbnails are made inside the step,
after its driver, so they count, and so does storing the larger events). The thumbnail cache is
cleared before every run, as for a new day. Prints the medians, their ratio (goal: at most 1.02x
per step and per run) and each materialization's preview size (goal: under 64 KB).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import dagster as dg

REPO = Path(__file__).resolve().parent.parent
NIGHTLY = REPO / "examples" / "nightly"


def _step_seconds(instance: dg.DagsterInstance, run_id: str) -> Dict[str, float]:
    start: Dict[str, float] = {}
    out: Dict[str, float] = {}
    for event in instance.all_logs(run_id):
        kind = event.dagster_event_type
        if event.step_key is None or kind is None:
            continue
        if kind == dg.DagsterEventType.STEP_START:
            start[event.step_key] = event.timestamp
        elif kind == dg.DagsterEventType.STEP_SUCCESS:
            out[event.step_key.split("__", 1)[-1]] = event.timestamp - start[event.step_key]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=300)  # the demo's day
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--day", default="2026-06-01")
    args = parser.parse_args()
    from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions
    from dagster_graphbook.store import previews

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        py = sys.executable
        subprocess.run(
            [py, NIGHTLY / "shapes_data.py", "--root", root / "data" / "incoming"]
            + ["--date", args.day, "--count", str(args.images)],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [py, NIGHTLY / "train_shapes_cnn.py", "--out", root / "models" / "shapes_cnn.pt"]
            + ["--train-count", "600", "--epochs", "2"],
            check=True,
            capture_output=True,
        )
        jobs = {}
        for mode, preview in (("on", None), ("off", False)):
            defs = build_definitions(
                [
                    GraphbookWorkflow(
                        REPO / "workflows" / "nightly_shapes.json",
                        custom_nodes=[REPO / "custom_nodes" / "nightly"],
                        partitions_def=daily_partitions("2026-01-01"),
                        executor="in_process",
                        preview=preview,
                    )
                ],
                notes_dir=str(root / "notes"),
            )
            jobs[mode] = defs.resolve_job_def("nightly_shapes")
        os.chdir(root)  # the workflow's relative paths (data/, models/, outputs/)
        (root / "home").mkdir()
        steps: Dict[str, Dict[str, List[float]]] = {"on": {}, "off": {}}
        runs: Dict[str, List[float]] = {"on": [], "off": []}
        sizes: Dict[str, int] = {}
        config = {"ops": {"nightly_shapes__ReviewSplit": {"config": {"threshold": 0.6}}}}
        with dg.DagsterInstance.from_config(str(root / "home")) as instance:
            for _ in range(args.rounds):
                for mode in ("on", "off"):
                    previews._SHOWN.clear()  # each round as a new day: no thumbnail made before
                    began = time.perf_counter()
                    result = jobs[mode].execute_in_process(
                        instance=instance, partition_key=args.day, run_config=config
                    )
                    runs[mode].append(time.perf_counter() - began)
                    assert result.success
                    for step, seconds in _step_seconds(instance, result.run_id).items():
                        steps[mode].setdefault(step, []).append(seconds)
                    if mode == "on":
                        for e in instance.all_logs(
                            result.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
                        ):
                            m = e.asset_materialization
                            if m is not None and isinstance(
                                m.metadata.get("preview"), dg.MarkdownMetadataValue
                            ):
                                size = len(str(m.metadata["preview"].value).encode())
                                sizes[m.asset_key.to_user_string()] = size
    print(f"nightly_shapes, {args.images} images, {args.rounds} interleaved rounds (medians)")
    print("| step | previews on (s) | off (s) | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    for step in sorted(steps["off"]):
        on, off = statistics.median(steps["on"][step]), statistics.median(steps["off"][step])
        verdict = (
            "PASS" if on <= 1.02 * off else "PASS (within 5 ms)" if on - off < 0.005 else "MISS"
        )
        print(f"| {step} | {on:.3f} | {off:.3f} | {on / off:.3f}x | <= 1.02x: {verdict} |")
    on, off = statistics.median(runs["on"]), statistics.median(runs["off"])
    verdict = "PASS" if on <= 1.02 * off else "MISS"
    print(f"| whole run | {on:.3f} | {off:.3f} | {on / off:.3f}x | <= 1.02x: {verdict} |")
    print()
    print("| asset | preview entry (bytes) | target |")
    print("| --- | --- | --- |")
    for key, size in sorted(sizes.items()):
        print(f"| {key} | {size:,} | <= 65,536: {'PASS' if size <= 65536 else 'MISS'} |")


if __name__ == "__main__":
    main()
