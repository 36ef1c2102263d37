"""By-hand benchmark: one day of the nightly demo on one box with local storage, and the same day
on the production rehearsal's parts (issue 34).

    .venv/bin/python benchmarks/bench_deploy.py [--images 64] [--repeats 1] [--shards 4]
        [--modes one-box,one-box-bucket,two-nodes]

Not a test. The day's images and the demo's CNN are made once into benchmarks/.data/deploy/
(ignored by git). The parts are those of tests/e2e/test_production_rehearsal.py
(tests/e2e/production_parts.py): moto's S3 server, a PostgreSQL cluster of its own, a Ray head
and a worker node on 127.0.0.1 (one logical GPU each), ``dagster-daemon`` and
``dagster-webserver``; all are up for the whole benchmark (idle while the one-box modes run).
Three modes, interleaved repeat by repeat, each the nightly job with ``ClassifyShapes`` in
``--shards`` shards:

- one box: graphbook_executor's multiprocess mode (a process per step, forked from a server),
  a sqlite instance, images, notes and outputs on local disk;
- one box, bucket: the same with the images, notes and outputs in the bucket (s3fs);
- two nodes, bucket: a one-day backfill launched through the webserver's GraphQL, its run
  dequeued by the daemon and recorded in Postgres, each shard a Ray job on the two-node cluster
  (each asks for a GPU: two run at once, one a node) and the steps asking for nothing forked
  beside the run worker (dagster-graphbook's Ray executor, issue 43), notes in the bucket.

Read from each run's events: wall (RUN_START to RUN_SUCCESS, the same in every mode), items/s,
the steps' start-up (a step's launch to its STEP_START: a process, imports, the job rebuilt;
a Ray job's placement too) and own seconds (STEP_START to STEP_SUCCESS), summed over steps;
the per-item overhead of the bucket (one box, bucket less one box) and of Ray (two nodes less one
box, bucket); for the backfill, launch to the run's creation (the daemon's backfill loop, every
30 s: Dagster's DEFAULT_DAEMON_INTERVAL_SECONDS), to RUN_START (the queue, the run worker) and
to the first shard's STEP_START. The start-up on the critical path: the steps' start-up along
the chain of steps that waited for each other (printed per run, step by step, with their own
seconds), and the run worker's (the launch's RUN_STARTING to RUN_START); how many steps ran as
Ray jobs (STEP_WORKER_STARTING with a "Ray Submission ID"). Prints medians, the load average
with each run, and the ratio of the two-node bucket day's wall to the one-box day's (issue 43's
goals: at most 2x at 400 images, 1.3x at 2,000).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import dagster as dg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # the parts module and the tests' servers
sys.path.insert(0, str(HERE))  # bench_sharding's inputs

from bench_sharding import day_inputs  # noqa: E402

from tests.e2e import production_parts as parts  # noqa: E402
from tests.support.s3 import moto_server  # noqa: E402
from tests.support.webserver import serve_webserver  # noqa: E402

CACHE = HERE / ".data" / "deploy"
DAY = "2026-04-01"
MODES = ("one box", "one box, bucket", "two nodes, bucket")
_FLAGS = dict(zip(("one-box", "one-box-bucket", "two-nodes"), MODES))
QUIET = {"console": {"config": {"log_level": "WARNING"}}}


def _events(instance: dg.DagsterInstance, run_id: str) -> Dict[str, float]:
    """The run's RUN_START, RUN_SUCCESS and first shard STEP_START times (epoch seconds) and
    its creation time."""
    found: Dict[str, float] = {}
    launched: Dict[str, float] = {}
    started: Dict[str, float] = {}
    ended: Dict[str, float] = {}
    startup = own = 0.0
    ray_jobs = 0
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        kind, step = event.event_type_value, entry.step_key or ""
        if kind == "STEP_WORKER_STARTING":
            launched[step] = entry.timestamp
            metadata = getattr(event.event_specific_data, "metadata", None) or {}
            ray_jobs += "Ray Submission ID" in metadata  # else forked beside the run worker
        elif kind == "STEP_START":
            started[step] = entry.timestamp
            startup += entry.timestamp - launched.get(step, entry.timestamp)
        elif kind == "STEP_SUCCESS":
            own += entry.timestamp - started[step]
            ended[step] = entry.timestamp
        elif kind in ("RUN_STARTING", "PIPELINE_STARTING"):  # the launcher starts the run worker
            found["worker_launched"] = entry.timestamp
        if kind in ("PIPELINE_START", "RUN_START"):
            found["start"] = entry.timestamp
        elif kind in ("PIPELINE_SUCCESS", "RUN_SUCCESS"):
            found["end"] = entry.timestamp
        elif kind == "STEP_START" and "__shard[" in (entry.step_key or ""):
            found.setdefault("first_shard", entry.timestamp)
    record = instance.get_run_record_by_id(run_id)
    assert record is not None and "end" in found, f"run {run_id} did not succeed"
    found["created"] = record.create_timestamp.timestamp()
    found["startup"], found["own"] = startup, own
    found["critical"] = _critical_startup(launched, started, ended)
    # the run worker's own start-up (a process importing Dagster, torch and the code location):
    # the launcher's RUN_STARTING to the worker's RUN_START (none where the run ran in this
    # process)
    found["worker_startup"] = found["start"] - found.get("worker_launched", found["start"])
    found["ray_jobs"], found["steps"] = ray_jobs, len(launched)
    return found


def _critical_startup(
    launched: Dict[str, float], started: Dict[str, float], ended: Dict[str, float]
) -> float:
    """Seconds of step start-up (launch to STEP_START) on the run's critical path: from the step
    that ended last, back through the step that ended last before each one was launched."""
    total, step = 0.0, max(ended, key=ended.__getitem__, default=None)
    chain = []
    while step is not None:
        startup = started[step] - launched.get(step, started[step])
        total += startup
        name = step.rsplit("__", 1)[-1]
        chain.append(f"{name} {startup:.1f} s (own {ended[step] - started[step]:.1f} s)")
        before = {s: t for s, t in ended.items() if t <= launched.get(step, started[step])}
        step = max(before, key=before.__getitem__, default=None)
    print(f"[bench]   critical path, start-up (own): {', '.join(reversed(chain))}", flush=True)
    return total


def _one_box(
    home: Path, workflow: Path, notes_dir: str, shards: int, images: int
) -> Dict[str, float]:
    """The day on one box: the job on graphbook_executor's multiprocess mode."""
    from dagster_graphbook.defs.executor import MULTIPROCESS

    recon = dg.build_reconstructable_job(
        "tests.e2e.production_parts",
        "nightly_job",
        reconstructable_kwargs={
            "workflow": str(workflow),
            "notes_dir": notes_dir,
            "shards": shards,
        },
        reconstructor_working_directory=str(REPO),
    )
    with dg.DagsterInstance.from_config(str(home)) as instance:
        result = dg.execute_job(
            recon,
            instance=instance,
            run_config={"execution": {"config": dict(MULTIPROCESS)}, "loggers": QUIET},
            tags={"dagster/partition": DAY},
            raise_on_error=False,
        )
        if not result.success:
            raise SystemExit(f"the one-box run {result.run_id} failed: see {home}")
        times = _events(instance, result.run_id)
    return _figures(times, images)


def _figures(times: Dict[str, float], images: int) -> Dict[str, float]:
    """A run's wall (RUN_START to RUN_SUCCESS), items/s and its steps' start-up and own seconds."""
    wall = times["end"] - times["start"]
    return {
        "wall": wall,
        "items_s": images / wall,
        "startup": times["startup"],
        "own": times["own"],
        "critical": times["critical"],
        "worker_startup": times["worker_startup"],
        "ray_jobs": times["ray_jobs"],
        "steps": times["steps"],
    }


def _two_nodes(web: Any, home: Path, images: int) -> Dict[str, float]:
    """The day as a one-day backfill through the webserver, run by the daemon on Ray."""
    launched = time.time()
    backfill = parts.launch_backfill(web, [DAY])
    (run,) = parts.wait_backfill_runs(web, backfill, 1, timeout_s=900)
    if run["status"] != "SUCCESS":
        raise SystemExit(f"the two-node run {run['runId']} ended {run['status']}: see {home}")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        times = _events(instance, run["runId"])
    return {
        **_figures(times, images),
        "to_created": times["created"] - launched,
        "to_start": times["start"] - launched,
        "to_first_shard": times["first_shard"] - launched,
        "launch_to_end": times["end"] - launched,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64, help="images in the day")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved runs of each mode")
    parser.add_argument("--shards", type=int, default=4, help="shards of ClassifyShapes")
    parser.add_argument(
        "--modes",
        default=",".join(_FLAGS),
        help="the modes to run, comma-separated (two-nodes starts Postgres, Ray and the daemon)",
    )
    args = parser.parse_args()
    modes = [_FLAGS[m] for m in args.modes.split(",")]
    # the step processes import the parts module (the job rebuilt in each)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )
    inputs = day_inputs(args.images, CACHE, DAY)
    batch = min(64, math.ceil(args.images / args.shards))  # a shard's notes in one batch
    load_before = os.getloadavg()
    print(
        f"[bench] {args.images} images, {args.shards} shards (batches of {batch}), "
        f"{args.repeats} repeats, {os.cpu_count()} cores, load average {load_before[0]:.2f}",
        flush=True,
    )
    runs: Dict[str, List[Dict[str, float]]] = {mode: [] for mode in modes}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gbbench")))
        endpoint = stack.enter_context(moto_server())
        aws = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }
        os.environ.update(aws)  # this process and the one-box step processes
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir("bench")
        for image in inputs["folder"].iterdir():
            for prefix in ("onebox", "ray"):
                fs.put_file(str(image), f"bench/{prefix}/incoming/{DAY}/{image.name}")

        web: Any = None
        ray_home, local_home = tmp / "ray_home", tmp / "local_home"
        for home in (ray_home, local_home):
            home.mkdir()
        (local_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        checkpoint = str(inputs["checkpoint"])
        if MODES[2] in modes:  # the rehearsal's parts
            pg = stack.enter_context(parts.postgres_cluster())
            os.environ.update(pg.instance_env())  # the docs' dagster.yaml reads DAGSTER_PG_*
            aws.update(pg.instance_env())
            head = stack.enter_context(parts.ray_node(1, env=aws))
            stack.enter_context(parts.ray_node(1, head=head, env=aws))
            assert head.dashboard is not None
            (ray_home / "dagster.yaml").write_text(parts.documented_instance_yaml())
            code = tmp / "code"
            ray_workflow = parts.nightly_workflow(code, "s3://bench/ray", checkpoint, batch)
            workspace = parts.write_code_location(
                code,
                workflow=str(ray_workflow),
                notes_dir="s3://bench/ray/notes",
                shards=args.shards,
                ray_address=head.dashboard,
                env_vars=[f"{k}={v}" for k, v in aws.items()],
            )
            daemon_env = {**aws, "DAGSTER_STEP_DELEGATING_EXECUTOR_SLEEP_SECONDS": "0.2"}
            stack.enter_context(parts.dagster_daemon(workspace, ray_home, env=daemon_env))
            web = stack.enter_context(serve_webserver(workspace, ray_home, None, env=aws))

        local_root = tmp / "local"  # the day's images linked in, outputs written there
        (local_root / "incoming").mkdir(parents=True)
        os.symlink(inputs["folder"], local_root / "incoming" / DAY)
        local_workflow = parts.nightly_workflow(local_root, str(local_root), checkpoint, batch)
        bucket_workflow = parts.nightly_workflow(
            tmp / "bucket", "s3://bench/onebox", checkpoint, batch
        )
        for repeat in range(args.repeats):
            for mode in modes:
                if mode == "one box":
                    notes = str(tmp / "notes")
                    run = _one_box(local_home, local_workflow, notes, args.shards, args.images)
                elif mode == "one box, bucket":
                    notes = "s3://bench/onebox/notes"
                    run = _one_box(local_home, bucket_workflow, notes, args.shards, args.images)
                else:
                    run = _two_nodes(web, ray_home, args.images)
                runs[mode].append(run)
                print(
                    f"[bench] repeat {repeat + 1}: {mode} {run['wall']:.1f} s "
                    f"({run['items_s']:.1f} items/s, start-up on the critical path "
                    f"{run['critical']:.1f} s + run worker {run['worker_startup']:.1f} s, "
                    f"load average {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    _report(args, runs, load_before)


def _median(runs: List[Dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _report(
    args: argparse.Namespace, runs: Dict[str, List[Dict[str, float]]], load_before: Any
) -> None:
    base = _median(runs.get(MODES[0]) or next(iter(runs.values())), "wall")
    print()
    print(
        "| mode | wall s (median, RUN_START to RUN_SUCCESS) | items/s | vs one box "
        "| steps' start-up s (sum) | start-up s on the critical path (steps + run worker) "
        "| steps' own s (sum) | Ray jobs / steps |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for mode, rs in runs.items():
        wall = _median(rs, "wall")
        critical, worker = _median(rs, "critical"), _median(rs, "worker_startup")
        print(
            f"| {mode} | {wall:.1f} | {args.images / wall:.1f} | {wall / base:.2f}x "
            f"| {_median(rs, 'startup'):.1f} | {critical + worker:.1f} ({critical:.1f} + "
            f"{worker:.1f}) | {_median(rs, 'own'):.1f} "
            f"| {_median(rs, 'ray_jobs'):.0f} / {_median(rs, 'steps'):.0f} |"
        )
    if set(MODES[:2]) <= set(runs):
        bucket = _median(runs[MODES[1]], "wall")
        print(
            f"\nper-item overhead of the bucket {(bucket - base) / args.images * 1000:.1f} ms "
            f"(one box, bucket less one box): {bucket / base:.2f}x"
        )
    if set(MODES[1:]) <= set(runs):
        ray = _median(runs[MODES[2]], "wall")
        print(
            f"per-item overhead of Ray {(ray - bucket) / args.images * 1000:.1f} ms "
            "(two nodes, bucket less one box, bucket)"
        )
    if MODES[2] in runs:
        two = runs[MODES[2]]
        print(
            f"backfill launch to: the run created {_median(two, 'to_created'):.1f} s (the "
            f"daemon's backfill loop, every 30 s), RUN_START {_median(two, 'to_start'):.1f} s, "
            f"the first shard's STEP_START {_median(two, 'to_first_shard'):.1f} s, RUN_SUCCESS "
            f"{_median(two, 'launch_to_end'):.1f} s"
        )
        ratio = _median(two, "wall") / base
        print(
            f"the two-node bucket day against the one-box day: {ratio:.2f}x (issue 43's goals: "
            "at most 2x at 400 images, 1.3x at 2,000)"
        )
    load_after = os.getloadavg()
    print(
        f"{args.images} images, {args.shards} shards, {args.repeats} repeats, "
        f"{os.cpu_count()} cores, load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after"
    )


if __name__ == "__main__":
    main()
