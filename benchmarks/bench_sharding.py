"""By-hand benchmark: the nightly demo's ClassifyShapes step in 1, 2 and 4 shards (issue 24).

    .venv/bin/python benchmarks/bench_sharding.py [--images 40000] [--repeats 3]
        [--shards 1 2 4] [--start-method spawn|forkserver]

Not a test. One day of ``--images`` shapes (examples/nightly/shapes_data.py) and the demo's CNN
(examples/nightly/train_shapes_cnn.py) are made once into benchmarks/.data/sharding/ (ignored by
git). A real instance (a temporary DAGSTER_HOME) records IncomingImages once; then, interleaved
repeat by repeat, each shard count runs the ClassifyShapes asset alone on the multiprocess
executor (a process per op: the unsharded op, or plan, each shard and commit). Only that step
is timed because sharding changes only that step: the job's other steps are the same work
whichever the shard count, and SaveResized (a PNG per confident image) would dilute the ratio.

Read from each run's events in the instance: wall (execute_job, start to end), start-up per shard
(an op's launch to its STEP_START: a process, imports, the job rebuilt, the model loaded),
plan + commit (the step's time outside its shards: the first launch to the last success, less
the first shard's launch to the last shard's success), the step's own seconds (summed over
shards), and the
CPU seconds of the run's processes (``os.times`` of waited-for children: step processes and
their loader workers; spawn only). Each run's notes are compared with the unsharded run's.
Prints medians, the speed-up against 1 shard measured in the same run, the 0.8 x N goal for N up
to the free cores, and the model of when sharding pays with its break-even image count.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import dagster as dg

from dagster_graphbook.defs.executor import MULTIPROCESS

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"
CACHE = HERE / ".data" / "sharding"
DAY = "2025-06-01"
JOB = "nightly_shapes"
STEP = dg.AssetKey([JOB, "ClassifyShapes"])
SOURCE = dg.AssetKey([JOB, "IncomingImages"])
OP = f"{JOB}__ClassifyShapes"
QUIET = {"console": {"config": {"log_level": "WARNING"}}}  # the run's events stay in the instance


def definitions(shards: int, notes_dir: str) -> dg.Definitions:
    """The nightly demo with ClassifyShapes in ``shards`` shards (1: the unsharded op)."""
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    spec = GraphbookWorkflow(
        WORKFLOW,
        custom_nodes=[NODES],
        shards={"ClassifyShapes": shards} if shards > 1 else None,
    )
    return build_definitions([spec], notes_dir=notes_dir)


def nightly_job(shards: int, notes_dir: str) -> dg.JobDefinition:
    """The job, rebuilt in each step process (``dg.build_reconstructable_job``)."""
    return definitions(shards, notes_dir).resolve_job_def(JOB)


def day_inputs(images: int, cache: Path = CACHE, day: str = DAY) -> Dict[str, Path]:
    """The ``day``'s images (its ``folder``) and the CNN (``checkpoint``) under ``cache``, made by
    the demo's own scripts when missing (benchmarks/bench_deploy.py uses them too)."""
    scripts = REPO / "examples" / "nightly"
    root = cache / f"images_{images}"
    if not (root / day).is_dir():
        print(f"[bench] writing {images} images into {root / day}", flush=True)
        subprocess.run(
            [sys.executable, str(scripts / "shapes_data.py"), "--root", str(root)]
            + ["--date", day, "--count", str(images)],
            check=True,
        )
    checkpoint = cache / "shapes_cnn.pt"
    if not checkpoint.is_file():
        print(f"[bench] training the shapes CNN into {checkpoint}", flush=True)
        subprocess.run(
            [sys.executable, str(scripts / "train_shapes_cnn.py"), "--out", str(checkpoint)]
            + ["--train-count", "2000", "--epochs", "8"],
            check=True,
        )
    return {"folder": root / day, "checkpoint": checkpoint}


def _execution(start_method: str) -> Dict[str, Any]:
    if start_method == "forkserver":  # what a sharded job runs with by default
        return {"config": dict(MULTIPROCESS)}
    return {"config": {"multiprocess": {"start_method": {"spawn": {}}}}}


def _run(
    instance: dg.DagsterInstance,
    shards: int,
    notes_dir: str,
    selection: dg.AssetKey,
    run_config: Dict[str, Any],
) -> Dict[str, Any]:
    """One run of ``selection`` on the multiprocess executor: its wall time, CPU and events."""
    recon = dg.build_reconstructable_job(
        "bench_sharding",
        "nightly_job",
        reconstructable_args=(shards, notes_dir),
        reconstructor_working_directory=str(HERE),
    )
    cpu0 = os.times()
    start = time.perf_counter()
    result = dg.execute_job(
        recon,
        instance=instance,
        run_config=run_config,
        asset_selection=[selection],
        raise_on_error=False,
    )
    wall = time.perf_counter() - start
    cpu1 = os.times()
    if not result.success:
        raise SystemExit(f"run {result.run_id} ({shards} shards) failed: see its event log")
    cpu = sum(cpu1[i] - cpu0[i] for i in range(4))  # user, system; own and waited children
    return {"wall": wall, "cpu": cpu, "run_id": result.run_id}


def _from_events(instance: dg.DagsterInstance, run_id: str) -> Dict[str, Any]:
    """Start-up per shard, plan + commit and the step's own seconds, from the run's events."""
    launched: Dict[str, float] = {}
    started: Dict[str, float] = {}
    done: Dict[str, float] = {}
    seconds = 0.0
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or not entry.step_key:
            continue
        kind = event.event_type_value
        if kind == "STEP_WORKER_STARTING":
            launched[entry.step_key] = entry.timestamp
        elif kind == "STEP_START":
            started[entry.step_key] = entry.timestamp
        elif kind == "STEP_SUCCESS":
            done[entry.step_key] = entry.timestamp
        elif kind == "ASSET_MATERIALIZATION":
            materialization = entry.asset_materialization
            if materialization is not None and materialization.asset_key == STEP:
                seconds = float(materialization.metadata["seconds"].value)  # type: ignore[arg-type]
    work = [k for k in started if k == OP or "__shard[" in k]
    ends = [k for k in started if k.endswith(("__plan", "__commit"))]
    phase = max(done[k] for k in work) - min(launched[k] for k in work)
    return {
        "startup": statistics.median(started[k] - launched[k] for k in work),
        # the step's time outside its shards: the plan and commit processes, and the waits
        # for a step process to exit before the next one starts
        "plan_commit": max(done.values()) - min(launched.values()) - phase if ends else 0.0,
        "seconds": seconds,
    }


def _or_default(value: Optional[int], default: str) -> str:
    return f"default ({default})" if value is None else str(value)


def _free_cores() -> float:
    return max(0.0, (os.cpu_count() or 1) - os.getloadavg()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=40000, help="images in the day")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each count")
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--start-method",
        choices=("spawn", "forkserver"),
        default="forkserver",
        help="how the executor starts step processes (forkserver, a sharded job's default: "
        "forked from a server that imported torch and dagster_graphbook once; spawn: Dagster's "
        "own default)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="ClassifyShapes.runtime.num_workers in every run (default: the step's, 2)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per step process (OMP_NUM_THREADS; default: torch's, one a core)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the step processes inherit it
    counts = sorted(set(args.shards) | {1})
    inputs = day_inputs(args.images)
    load_before = os.getloadavg()
    free = _free_cores()
    print(
        f"[bench] {args.images} images, shards {counts}, {args.repeats} repeats, "
        f"{os.cpu_count()} cores, load average {load_before[0]:.2f} ({free:.1f} cores free), "
        f"start method {args.start_method}, loader workers {_or_default(args.workers, '2')}, "
        f"torch threads {_or_default(args.threads, 'one a core')}",
        flush=True,
    )
    execution = _execution(args.start_method)
    runs: Dict[int, List[Dict[str, Any]]] = {n: [] for n in counts}
    differ: Dict[int, int] = {n: 0 for n in counts}
    with tempfile.TemporaryDirectory(prefix="bench_sharding_") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        notes_dir = str(Path(tmp) / "notes")
        with dg.DagsterInstance.from_config(str(home)) as instance:
            source_config = {
                "ops": {f"{JOB}__IncomingImages": {"config": {"folder": str(inputs["folder"])}}},
                "execution": execution,
                "loggers": QUIET,
            }
            _run(instance, 1, notes_dir, SOURCE, source_config)
            step_config = {
                "resources": {
                    f"{JOB}__ShapesModel": {"config": {"checkpoint": str(inputs["checkpoint"])}}
                },
                "execution": execution,
                "loggers": QUIET,
            }
            if args.workers is not None:
                runtime = {"runtime": {"num_workers": args.workers}}
                step_config["ops"] = {OP: {"config": runtime}}
            reader = definitions(1, notes_dir)
            for repeat in range(args.repeats):
                reference: Optional[List[Any]] = None
                for n in counts:
                    run = _run(instance, n, notes_dir, STEP, step_config)
                    run.update(_from_events(instance, run["run_id"]))
                    notes = reader.load_asset_value(STEP, instance=instance)
                    reference = notes if n == 1 else reference
                    differ[n] = max(differ[n], sum(a != b for a, b in zip(notes, reference or [])))
                    assert len(notes) == args.images, len(notes)
                    runs[n].append(run)
                    print(
                        f"[bench] repeat {repeat + 1}: {n} shards {run['wall']:.1f} s "
                        f"(start-up {run['startup']:.1f} s, step {run['seconds']:.1f} s)",
                        flush=True,
                    )
    _report(args, runs, differ, free, load_before)


def _median(runs: List[Dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _report(
    args: argparse.Namespace,
    runs: Dict[int, List[Dict[str, Any]]],
    differ: Dict[int, int],
    free: float,
    load_before: Any,
) -> None:
    cores = os.cpu_count() or 1
    base = _median(runs[1], "wall")
    spawn = args.start_method == "spawn"
    print()
    print(
        "| shards | wall s (median) | speed-up vs 1 | efficiency | start-up per shard s "
        "| plan + commit s | step s (sum of shards) | CPU s | cores busy | notes differ |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, rs in runs.items():
        wall = _median(rs, "wall")
        cpu = _median(rs, "cpu")
        print(
            f"| {n} | {wall:.1f} | {base / wall:.2f}x | {base / wall / n:.2f} "
            f"| {_median(rs, 'startup'):.1f} | {_median(rs, 'plan_commit'):.1f} "
            f"| {_median(rs, 'seconds'):.1f} | {f'{cpu:.0f}' if spawn else 'n/a'} "
            f"| {f'{cpu / wall:.2f}' if spawn else 'n/a'} | {differ[n]} of {args.images} |"
        )
    load_after = os.getloadavg()
    print(
        f"\n{args.images} images, {args.repeats} repeats, {cores} cores, load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; {free:.1f} cores free at the "
        f"start; start method {args.start_method}"
    )
    for n in runs:
        if n == 1:
            continue
        speedup = base / _median(runs[n], "wall")
        if n <= math.floor(free + 0.5):
            verdict = "PASS" if speedup >= 0.8 * n else "MISS"
            print(f"goal {n} shards: {speedup:.2f}x, target >= {0.8 * n:.1f}x: {verdict}")
        else:
            print(
                f"goal {n} shards: {speedup:.2f}x, not judged: {n} shards > {free:.1f} free "
                f"cores (the goal, >= 0.8 x N, holds for N up to the free cores or GPUs)"
            )
    _model(args, runs, cores)


def _model(args: argparse.Namespace, runs: Dict[int, List[Dict[str, Any]]], cores: int) -> None:
    """T(N) ~ T(1) - T_step(1) + T_start x (waves - 1) + T_plan_commit + T_step(1) / p: the model
    with p = min(N, cores) (a core or device of its own per shard), the p the runs achieved, and
    the break-even image count."""
    sharded = [r for n, rs in runs.items() if n > 1 for r in rs]
    if not sharded:
        return
    t_start = statistics.median(r["startup"] for r in sharded)
    t_pc = statistics.median(r["plan_commit"] for r in sharded)
    t_one, t_step = _median(runs[1], "wall"), _median(runs[1], "seconds")
    per_item = t_step / args.images
    print(
        "\nwhen sharding pays: T(N) ~ T(1) - T_step(1) + T_start x (waves - 1) + T_plan_commit "
        "+ T_step(1) / p, waves = ceil(N / slots), slots = step processes run at once (the "
        f"multiprocess executor's max_concurrent: {cores} here), p = min(N, slots, free cores or "
        "devices) when each shard has its own; it pays from "
        "n* = (T_start x (waves - 1) + T_plan_commit) / (t_item x (1 - 1/p)) items\n"
        f"measured: T(1) {t_one:.1f} s, T_step(1) {t_step:.1f} s (t_item "
        f"{per_item * 1000:.2f} ms an image), T_start {t_start:.1f} s a shard, T_plan_commit "
        f"{t_pc:.1f} s"
    )
    for n in runs:
        if n == 1:
            continue
        p = min(n, cores)
        waves = math.ceil(n / min(n, cores))
        cost = t_start * (waves - 1) + t_pc
        predicted = t_one - t_step + cost + t_step / p
        measured = _median(runs[n], "wall")
        achieved = t_step / max(measured - (t_one - t_step) - cost, 1e-9)
        even = math.ceil(cost / (per_item * (1 - 1 / p)))
        print(
            f"  {n} shards: predicted {predicted:.1f} s with p = {p}, measured {measured:.1f} s "
            f"(p achieved {achieved:.2f}); pays from {even:,} images at p = {p}"
        )


if __name__ == "__main__":
    main()
