"""By-hand benchmark: incremental runs of the nightly demo (runtime.incremental, issue 45).

    .venv/bin/python benchmarks/bench_incremental.py [--images 2000] [--repeats 3] [--json PATH]
        [--threads 1]

Not a test. One day of ``--images`` shapes and one of 1% more (examples/nightly/shapes_data.py's
make_day, through bench_sharding's ``day_inputs``: the first images of both are the same) and the
demo's CNN (examples/nightly/train_shapes_cnn.py) are made once into benchmarks/.data/incremental/
(ignored by git). Each repeat is fresh: a temporary folder with a copy of the day, its own notes
folders (the incremental store lives beside the notes) and output folders, and runs
``workflows/nightly_shapes.json`` (custom_nodes/nightly) through ``run_workflow`` on the
in-process executor, against one temporary instance:

- (a) anchor: the first run with incremental off;
- (b) the first run with incremental on (a fresh store: every note computed and recorded);
- (c) a re-run after 1% new images land (the extra files of the bigger day, and its whole
  labels.csv, copied into the day's folder);
- (d) a re-run with nothing new;
- (e) a re-run after a change to SaveResized only (its ``size``): the steps before it reuse all.

(a) and (b) have notes and output folders of their own and swap order repeat by repeat. An
untimed warm-up (a small day, incremental off then on) first imports what the runs import; a
full garbage collection before each run keeps one from landing inside a timed one (a gen-2 pass
takes 0.2-0.3 s in this process once a few runs' objects are about). ``--threads`` (default 1)
sets torch's threads in this process, where the in-process executor runs ClassifyShapes: with
torch's default (one a core) beside the step's two loader workers, its model time varied 0.5 to
5 s from run to run on a 2-core machine, far more than the 5% to be told apart.

Read from each run's events: the step time, the sum over the steps of STEP_START to STEP_SUCCESS
(the steps' own work, the store's reads and writes included), and each step's notes computed
(materialization metadata ``notes_computed``); the wall time of ``run_workflow`` (building the
job, the run, reading the notes back). Prints medians, and the ratios against the anchors of the
same run: overhead (b)/(a) - 1 (goal <= 5%), 1%-new cost (c)/(b) (goal <= 5%), nothing new
(d)/(b), downstream change (e)/(b).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import dagster as dg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))  # bench_sharding's inputs

from bench_sharding import day_inputs  # noqa: E402

WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"
CACHE = HERE / ".data" / "incremental"
DAY = "2025-06-01"
STEPS = ("IncomingImages", "ClassifyShapes", "ReviewSplit", "SaveResized")
INCREMENTAL = ("ClassifyShapes", "ReviewSplit", "SaveResized")  # a source always runs
WARMUP_IMAGES = 64
SCENARIOS = {
    "a": "(a) first run, incremental off (anchor)",
    "b": "(b) first run, incremental on (fresh store)",
    "c": "(c) re-run, 1% new images",
    "d": "(d) re-run, nothing new",
    "e": "(e) re-run, SaveResized.size changed",
}


def _copy_day(source: Path, target: Path, count: Optional[int] = None) -> None:
    """``target``: the first ``count`` images of the day ``source`` (all: None) and their labels
    (``copy2``: the files keep their times, as a copied day does)."""
    with open(source / "labels.csv", newline="") as f:
        rows = list(csv.DictReader(f))[:count]
    target.mkdir(parents=True)
    for row in rows:
        shutil.copy2(source / row["file"], target / row["file"])
    with open(target / "labels.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["file", "label"])
        writer.writeheader()
        writer.writerows(rows)


def _add_late_images(bigger: Path, folder: Path) -> int:
    """Late data: the images of the day ``bigger`` that ``folder`` lacks, and its labels.csv
    (all rows), copied in. Returns how many images landed."""
    have = {p.name for p in folder.iterdir()}
    added = 0
    for path in sorted(bigger.glob("*.png")):
        if path.name not in have:
            shutil.copy2(path, folder / path.name)
            added += 1
    shutil.copy2(bigger / "labels.csv", folder / "labels.csv")
    return added


def _from_events(instance: dg.DagsterInstance, run_id: str) -> Dict[str, Any]:
    """Each step's seconds (STEP_START to STEP_SUCCESS) and its materialization metadata (its
    first asset's), from the run's event log."""
    started: Dict[str, float] = {}
    seconds: Dict[str, float] = {}
    meta: Dict[str, Dict[str, Any]] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or not entry.step_key:
            continue
        kind = event.event_type_value
        step = entry.step_key.rsplit("__", 1)[-1]
        if kind == "STEP_START":
            started[step] = entry.timestamp
        elif kind == "STEP_SUCCESS":
            seconds[step] = entry.timestamp - started[step]
        elif kind == "ASSET_MATERIALIZATION":
            m = entry.asset_materialization
            if m is not None:
                values = {k: v.value for k, v in m.metadata.items()}
                meta.setdefault(m.asset_key.path[1], values)
    return {"step_s": sum(seconds.values()), "per_step_s": seconds, "meta": meta}


class Day:
    """One repeat's runs: the day's folder, the notes and output folders in ``tmp``."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        tmp: Path,
        checkpoint: Path,
        source: Path,
        count: Optional[int] = None,
    ):
        self.instance, self.tmp, self.checkpoint = instance, tmp, checkpoint
        self.folder = tmp / "incoming" / DAY
        _copy_day(source, self.folder, count)

    def run(self, name: str, incremental: bool, **params: Any) -> Dict[str, Any]:
        from dagster_graphbook import run_workflow

        given = {
            "IncomingImages.folder": str(self.folder),
            "ShapesModel.checkpoint": str(self.checkpoint),
            "SaveResized.output_dir": str(self.tmp / f"outputs_{name}"),
            **params,
        }
        gc.collect()
        start = time.perf_counter()
        done = run_workflow(
            WORKFLOW,
            custom_nodes=[NODES],
            params=given,
            instance=self.instance,
            executor="in_process",
            notes_dir=str(self.tmp / f"notes_{name}"),
            runtime={"incremental": True} if incremental else None,
        )
        wall = time.perf_counter() - start
        if not done.success:
            raise SystemExit(f"run {done.run_id} failed:\n{done.failure}")
        found = _from_events(self.instance, done.run_id)
        meta = found.pop("meta")
        return {
            "run_id": done.run_id,
            "wall_s": wall,
            **found,
            "notes_in": len(done["IncomingImages"]["out"]),
            "computed": {s: meta.get(s, {}).get("notes_computed") for s in INCREMENTAL},
            "reused": {s: meta.get(s, {}).get("notes_reused") for s in INCREMENTAL},
            "classified": meta.get("ClassifyShapes", {}).get("images_classified"),
            "confident": len(done["ReviewSplit"]["confident"]),
        }


def _repeat(
    instance: dg.DagsterInstance,
    inputs: Dict[str, Path],
    bigger: Path,
    swap: bool,
    say: Callable[[str, Dict[str, Any]], None],
) -> Dict[str, Dict[str, Any]]:
    """One fresh repeat of the five scenarios."""
    runs: Dict[str, Dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_incremental_") as tmp:
        day = Day(instance, Path(tmp), inputs["checkpoint"], inputs["folder"])
        for key in ("b", "a") if swap else ("a", "b"):
            runs[key] = day.run(key, incremental=key == "b")
            say(key, runs[key])
        added = _add_late_images(bigger, day.folder)
        runs["c"] = day.run("b", incremental=True)
        runs["c"]["added"] = added
        say("c", runs["c"])
        runs["d"] = day.run("b", incremental=True)
        say("d", runs["d"])
        runs["e"] = day.run("b", incremental=True, **{"SaveResized.size": 40})
        say("e", runs["e"])
    _check(runs)
    return runs


def _check(runs: Dict[str, Dict[str, Any]]) -> None:
    """What each scenario must have computed (the benchmark measures the intended work)."""
    added = runs["c"]["added"]
    assert runs["a"]["classified"] == runs["b"]["classified"] == runs["a"]["notes_in"]
    assert runs["b"]["computed"]["ClassifyShapes"] == runs["b"]["notes_in"], runs["b"]
    assert runs["c"]["notes_in"] == runs["b"]["notes_in"] + added
    assert runs["c"]["computed"]["ClassifyShapes"] == added, runs["c"]["computed"]
    assert runs["c"]["computed"]["ReviewSplit"] == added, runs["c"]["computed"]
    assert runs["d"]["computed"] == {s: 0 for s in INCREMENTAL}, runs["d"]["computed"]
    assert runs["e"]["computed"]["ClassifyShapes"] == 0, runs["e"]["computed"]
    assert runs["e"]["computed"]["ReviewSplit"] == 0, runs["e"]["computed"]
    assert runs["e"]["computed"]["SaveResized"] == runs["e"]["confident"], runs["e"]


def _computed_text(run: Dict[str, Any]) -> str:
    if run["computed"]["ClassifyShapes"] is None:  # incremental off: every note
        return f"all (off): Classify {run['classified']}"
    short = {"ClassifyShapes": "Classify", "ReviewSplit": "Review", "SaveResized": "Save"}
    return ", ".join(f"{short[s]} {run['computed'][s]}" for s in INCREMENTAL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000, help="images in the day")
    parser.add_argument("--repeats", type=int, default=3, help="fresh repeats of each scenario")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads in this process (0: torch's default, one a core)",
    )
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the loader workers inherit it
        import torch

        torch.set_num_threads(args.threads)
    extra = max(1, round(args.images * 0.01))
    started = time.perf_counter()
    inputs = day_inputs(args.images, CACHE, DAY)
    bigger = day_inputs(args.images + extra, CACHE, DAY)["folder"]
    load_before = os.getloadavg()
    print(
        f"[bench] {args.images} images (+{extra} late), {args.repeats} repeats, "
        f"{os.cpu_count()} cores, load average {load_before[0]:.2f}, torch threads "
        f"{args.threads or 'default'}",
        flush=True,
    )

    def say(key: str, run: Dict[str, Any]) -> None:
        per_step = ", ".join(f"{s} {run['per_step_s'].get(s, 0):.2f}" for s in STEPS)
        print(
            f"[bench]   {SCENARIOS[key]}: steps {run['step_s']:.2f} s ({per_step}), wall "
            f"{run['wall_s']:.2f} s; computed {_computed_text(run)}",
            flush=True,
        )

    runs: Dict[str, List[Dict[str, Any]]] = {k: [] for k in SCENARIOS}
    with tempfile.TemporaryDirectory(prefix="bench_incremental_home_") as home:
        Path(home, "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        with dg.DagsterInstance.from_config(home) as instance:
            with tempfile.TemporaryDirectory(prefix="bench_incremental_warmup_") as tmp:
                warm = Day(
                    instance, Path(tmp), inputs["checkpoint"], inputs["folder"], WARMUP_IMAGES
                )
                warm.run("off", incremental=False)
                warm.run("on", incremental=True)
                print("[bench] warmed up", flush=True)
            for repeat in range(args.repeats):
                print(f"[bench] repeat {repeat + 1}", flush=True)
                for key, run in _repeat(instance, inputs, bigger, repeat % 2 == 1, say).items():
                    runs[key].append(run)
    results = _report(args, extra, runs, load_before, time.perf_counter() - started)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwrote {args.json}")


def _median(runs: List[Dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _report(
    args: argparse.Namespace,
    extra: int,
    runs: Dict[str, List[Dict[str, Any]]],
    load_before: Any,
    total_s: float,
) -> Dict[str, Any]:
    print()
    print("| scenario | step s (median) | wall s (median) | notes computed per step |")
    print("| --- | --- | --- | --- |")
    for key, rs in runs.items():
        print(
            f"| {SCENARIOS[key]} | {_median(rs, 'step_s'):.2f} | {_median(rs, 'wall_s'):.2f} "
            f"| {_computed_text(rs[-1])} |"
        )
    print()
    print("| scenario | " + " | ".join(f"{s} s" for s in STEPS) + " |")
    print("| --- |" + " --- |" * len(STEPS))
    for key, rs in runs.items():
        cells = [statistics.median(r["per_step_s"].get(s, 0.0) for r in rs) for s in STEPS]
        print(f"| {SCENARIOS[key]} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    step = {k: _median(rs, "step_s") for k, rs in runs.items()}
    wall = {k: _median(rs, "wall_s") for k, rs in runs.items()}
    ratios = {
        "overhead": (step["b"] / step["a"] - 1, wall["b"] / wall["a"] - 1, 0.05),
        "one_percent_new": (step["c"] / step["b"], wall["c"] / wall["b"], 0.05),
        "nothing_new": (step["d"] / step["b"], wall["d"] / wall["b"], None),
        "downstream_change": (step["e"] / step["b"], wall["e"] / wall["b"], None),
    }
    texts = {
        "overhead": "overhead (b)/(a) - 1",
        "one_percent_new": f"1%-new cost (c)/(b) ({extra} new)",
        "nothing_new": "nothing new (d)/(b)",
        "downstream_change": "downstream change (e)/(b)",
    }
    load_after = os.getloadavg()
    print(
        f"\n{args.images} images (+{extra} late), {args.repeats} repeats, {os.cpu_count()} "
        f"cores, torch threads {args.threads or 'default'}, load average {load_before[0]:.2f} "
        f"before, {load_after[0]:.2f} after; "
        f"{total_s / 60:.1f} min in all"
    )
    verdicts = {}
    for name, (by_step, by_wall, goal) in ratios.items():
        verdict = ""
        if goal is not None:
            verdicts[name] = "PASS" if by_step <= goal else "MISS"
            verdict = f", goal <= {goal:.0%} (step time): {verdicts[name]}"
        sign = "+" if name == "overhead" else ""
        print(f"{texts[name]}: step time {by_step:{sign}.1%}, wall {by_wall:{sign}.1%}{verdict}")
    return {
        "images": args.images,
        "late_images": extra,
        "repeats": args.repeats,
        "cores": os.cpu_count(),
        "threads": args.threads,
        "load_average": [load_before[0], load_after[0]],
        "total_s": total_s,
        "median_step_s": step,
        "median_wall_s": wall,
        "ratios": {k: {"step": v[0], "wall": v[1], "goal": v[2]} for k, v in ratios.items()},
        "verdicts": verdicts,
        "runs": runs,
    }


if __name__ == "__main__":
    main()
