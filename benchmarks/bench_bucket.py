"""By-hand benchmark: a day of the nightly demo with its images, notes and outputs on local disk,
and in a bucket (moto's S3 server) reached through a proxy that adds a latency to each request
(issue 43: many bucket requests in flight).

    .venv/bin/python benchmarks/bench_bucket.py [--images 300] [--repeats 3] [--latencies 0,20,50]
        [--modes local,bucket]

Not a test. The day's images and the demo's CNN are made once into benchmarks/.data/bucket/
(ignored by git), the images uploaded once to the bucket. Every bucket run goes through the
latency proxy of ``tests/latency_proxy.py`` (a process of its own), also at 0 ms, so the latency
is the one difference between the bucket rows; the proxy counts the requests of each run and
the most it saw in flight at once. Each run: ``run_workflow`` of workflows/nightly_shapes.json on
its default in-process executor (the batch steps' loader and dump workers are processes),
outputs and notes in a folder of their own. Modes interleave repeat by repeat.

Prints per mode the median wall seconds, the requests, the most in flight and the load average
(1 min) at each run's end; for each latency, what it added (median less the 0 ms bucket's) as a
share of what the run's requests would cost one after another (added / (requests x latency)):
1.0 is requests run serially, issue 43's goal is at most 0.10 at 50 ms.

To measure another checkout (the code before a change), point PYTHONPATH at it (it then wins
over the venv's editable install): the demo's nodes and workflow are read from this checkout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.append(str(REPO))  # the tests' servers (after PYTHONPATH: the package measured wins)
sys.path.append(str(HERE))


def _package_from_pythonpath() -> None:
    """A checkout named in PYTHONPATH wins over the venv's editable install (whose import hook
    sits ahead of sys.path): drop the hook when PYTHONPATH holds the package."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if any(os.path.isdir(os.path.join(p, "dagster_graphbook")) for p in paths):
        sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]


_package_from_pythonpath()

from bench_sharding import day_inputs  # noqa: E402

from tests.support.s3 import moto_server  # noqa: E402


def _proxy_module() -> Any:
    """tests/latency_proxy.py of this checkout (a PYTHONPATH checkout's tests may lack it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "latency_proxy", REPO / "tests" / "latency_proxy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


latency_proxy = _proxy_module().latency_proxy

CACHE = HERE / ".data" / "bucket"
DAY = "2025-06-01"
WORKFLOW = REPO / "workflows" / "nightly_shapes.json"
NODES = REPO / "custom_nodes" / "nightly"
BUCKET = "bench"


def _env(endpoint: str) -> None:
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
    )
    os.environ.pop("AWS_PROFILE", None)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def _run(root: str, folder: str, checkpoint: Path, home: str) -> float:
    from dagster_graphbook import run_workflow

    start = time.perf_counter()
    result = run_workflow(
        WORKFLOW,
        custom_nodes=[NODES],
        params={
            "IncomingImages.folder": folder,
            "ShapesModel.checkpoint": str(checkpoint),
            "SaveResized.output_dir": f"{root}/outputs",
        },
        notes_dir=f"{root}/notes",
        dagster_home=home,
        executor="in_process",
    )
    wall = time.perf_counter() - start
    if not result.success:
        raise SystemExit(f"run failed: {result.failure}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latencies", default="0,20,50", help="ms a request, comma-separated")
    parser.add_argument("--modes", default="local,bucket")
    args = parser.parse_args()
    modes = args.modes.split(",")
    latencies = [float(x) for x in args.latencies.split(",")] if "bucket" in modes else []
    if latencies and 0.0 not in latencies:
        latencies.insert(0, 0.0)
    inputs = day_inputs(args.images, CACHE, DAY)
    import dagster_graphbook

    print(f"[bench] package: {Path(dagster_graphbook.__file__).parent}", flush=True)
    print(f"[bench] {os.cpu_count()} cores, {args.images} images, {args.repeats} repeats")
    rows: Dict[str, List[Dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-bucket-") as tmp, moto_server() as upstream:
        import contextlib

        with contextlib.ExitStack() as stack:
            proxies = {ms: stack.enter_context(latency_proxy(upstream, ms)) for ms in latencies}
            if latencies:
                _env(upstream)
                import s3fs

                fs = s3fs.S3FileSystem(skip_instance_cache=True)
                fs.mkdir(BUCKET)
                fs.put([str(p) for p in inputs["folder"].iterdir()], f"{BUCKET}/incoming/{DAY}/")
            home = os.path.join(tmp, "home")
            os.makedirs(home)
            for repeat in range(args.repeats):
                if "local" in modes:
                    root = os.path.join(tmp, f"local-{repeat}")
                    wall = _run(root, str(inputs["folder"]), inputs["checkpoint"], home)
                    _note(rows, "local", repeat, wall, None)
                for ms in latencies:
                    proxy = proxies[ms]
                    _env(proxy.endpoint)
                    proxy.reset()
                    root = f"s3://{BUCKET}/run-{int(ms)}ms-{repeat}"
                    folder = f"s3://{BUCKET}/incoming/{DAY}"
                    wall = _run(root, folder, inputs["checkpoint"], home)
                    _note(rows, f"bucket {ms:g} ms", repeat, wall, proxy.stats())
    _report(rows, latencies)


def _note(rows: Dict[str, List[Dict[str, Any]]], mode: str, repeat: int, wall: float,
          stats: Any) -> None:  # fmt: skip
    load = os.getloadavg()[0]
    row = {"wall": wall, "load": load, **({} if stats is None else stats)}
    rows.setdefault(mode, []).append(row)
    extra = (
        f", {stats['requests']} requests, {stats['max_in_flight']} in flight at most"
        if stats
        else ""
    )
    print(f"[bench] repeat {repeat + 1} {mode}: {wall:.2f} s{extra} (load {load:.2f})", flush=True)


def _report(rows: Dict[str, List[Dict[str, Any]]], latencies: List[float]) -> None:
    print("\nmode              median s  requests  in flight  load avg (each run)")
    for mode, runs in rows.items():
        wall = statistics.median(r["wall"] for r in runs)
        requests = statistics.median(r.get("requests", 0) for r in runs)
        flight = max(r.get("max_in_flight", 0) for r in runs)
        loads = " ".join(f"{r['load']:.2f}" for r in runs)
        print(f"{mode:<17} {wall:8.2f}  {requests:8.0f}  {flight:9d}  {loads}")
    base = rows.get("bucket 0 ms")
    if not base:
        return
    base_wall = statistics.median(r["wall"] for r in base)
    for ms in latencies:
        if not ms:
            continue
        runs = rows[f"bucket {ms:g} ms"]
        added = statistics.median(r["wall"] for r in runs) - base_wall
        requests = statistics.median(r["requests"] for r in runs)
        share = added / (requests * ms / 1000)
        print(
            f"{ms:g} ms a request: +{added:.2f} s over {requests:.0f} requests "
            f"({requests * ms / 1000:.1f} s one after another): share {share:.3f}"
        )


if __name__ == "__main__":
    main()
