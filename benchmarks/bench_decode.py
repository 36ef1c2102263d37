"""By-hand benchmark of decoding images on the device: ``encoded_image`` vs PIL in the loader pool.

    python benchmarks/bench_decode.py [--device cuda|cpu] [--workers 1,2,4,8,16] [--items 2000]
        [--big 400] [--repeats 3] [--batch-size 64] [--quick] [--out FILE]

Not a test. Images/s of JPEGs decoded and resized to 224x224 float32 tensors, for each loader
worker count (counts above 2x the CPUs are skipped), on the 256x256 set (--items) and the
1024x1024 set (--big), by:
  (a) the batch op with the nightly demo's PIL load_fn (decode + resize in the loader workers),
      device cpu: the CPU pool;
  (b) the batch op with ``load_fn = encoded_image(item, 224)`` (the workers only read bytes),
      decoded and resized by ``decode_batch`` on --device (default: cuda where torch sees it);
  (c) ``decode_batch`` alone on --device over batches already in memory (no pool, no files).
Each run includes starting and stopping the pool, as one Dagster op run does; (a) and (b) run
interleaved, run by run, after one warm-up; medians of --repeats. The ratio is (b) over (a) at
the same worker count. --out appends the tables as Markdown, under a line naming torch,
torchvision, the device and the CPU count. --quick: 64 + 16 images, workers 1,2, one repeat.
Images come from benchmarks/.data/ (made on first use).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # the project, importable without installing it

import torch  # noqa: E402
import torchvision  # noqa: E402
from baselines import measure_round_robin  # noqa: E402
from bench_loader import f2, print_table, rate, ratio, scale_worker_counts  # noqa: E402
from imageset import make_image_set  # noqa: E402

from dagster_graphbook import encoded_image  # noqa: E402
from dagster_graphbook.authoring.steps import BatchStep  # noqa: E402
from dagster_graphbook.execution.batch.decode import decode_batch  # noqa: E402
from dagster_graphbook.execution.batch.run import run_batch_step  # noqa: E402
from dagster_graphbook.plan.settings import BatchRuntime  # noqa: E402

DATA = HERE / ".data"
SIZE = 224


def pil_load(path: str) -> torch.Tensor:
    """The nightly demo's load_fn (custom_nodes/nightly/nightly_nodes.py ClassifyShapes)."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)


def encoded_load(path: str) -> Any:
    return encoded_image(path, SIZE)


class DecodeStep(BatchStep):
    """A batch step whose on_item_batch only stacks the batch and reduces it on the device."""

    def __init__(self, load: Callable[[str], Any], batch_size: int):
        super().__init__(batch_size=batch_size, item_key="path")
        self.load_fn = load  # type: ignore[method-assign]
        self.total = 0.0

    def on_item_batch(self, outputs, items, notes):
        self.total += float(torch.stack(list(outputs)).mean())  # waits for the device's work
        return None


def run_op(paths: Sequence[str], load: Callable[[str], Any], workers: int, device: str, bs: int):
    settings = BatchRuntime(num_workers=workers, device=device)
    result = run_batch_step(DecodeStep(load, bs), [{"path": p} for p in paths], settings)
    if result.stats["items"] != len(paths) or result.errors:
        raise RuntimeError(f"{len(result.errors)} items failed: {result.stats}")


def decode_alone(encoded: List[Any], device: str, bs: int) -> Callable[[], None]:
    def run() -> None:
        for start in range(0, len(encoded), bs):
            decoded, failures = decode_batch(encoded[start : start + bs], device)
            if failures:
                raise RuntimeError(failures[0][1])
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return run


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    import platform

    return platform.processor() or platform.machine() or "cpu"


def bench_set(paths: List[str], label: str, args, workers: List[int]) -> List[str]:
    """One image set: the table printed, and returned as Markdown lines."""
    n, reps = len(paths), args.repeats
    runs: Dict[str, Callable[[], None]] = {}
    for w in workers:
        runs[f"a{w}"] = lambda w=w: run_op(paths, pil_load, w, "cpu", args.batch_size)
        runs[f"b{w}"] = lambda w=w: run_op(paths, encoded_load, w, args.device, args.batch_size)
    encoded = [encoded_load(p) for p in paths]
    runs["c"] = decode_alone(encoded, args.device, args.batch_size)
    times = measure_round_robin(runs, reps, args.timeout)

    def its(key: str) -> Optional[float]:
        got = times[key]
        if isinstance(got, BaseException):
            print(f"  {key}: {type(got).__name__}: {got}")
            return None
        return rate(n, got)

    header = [
        "loader workers",
        "(a) PIL in the CPU pool, img/s",
        f"(b) encoded_image + decode on {args.device}, img/s",
        "(b)/(a)",
    ]
    rows = [[str(w), f2(its(f"a{w}"), 1), f2(its(f"b{w}"), 1), ratio(its(f"b{w}"), its(f"a{w}"))]
            for w in workers]  # fmt: skip
    alone = its("c")
    title = (
        f"{label}: {n} JPEGs decoded + resized to {SIZE}x{SIZE} float32, batch "
        f"{args.batch_size}, median of {reps} interleaved run(s) after 1 warm-up"
    )
    print(f"\n{title}")
    print_table(header, rows)
    tail = f"(c) decode_batch alone on {args.device}, no pool: {f2(alone, 1)} img/s"
    print(tail)
    md = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    return md + ["", tail, ""]


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--workers", default="1,2,4,8,16")
    p.add_argument("--items", type=int, default=2000)
    p.add_argument("--big", type=int, default=400)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--quick", action="store_true", help="64 + 16 images, workers 1,2, 1 repeat")
    p.add_argument("--out", help="append the tables as Markdown to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.items, args.big, args.workers, args.repeats = 64, 16, "1,2", 1
    workers, skipped = scale_worker_counts(args.workers)
    t0 = time.perf_counter()
    sets = [
        (make_image_set(DATA, args.items, 256), "256x256"),
        (make_image_set(DATA, args.big, 1024), "1024x1024"),
    ]
    head = (
        f"bench_decode {time.strftime('%Y-%m-%d %H:%M')}: torch {torch.__version__}, "
        f"torchvision {torchvision.__version__}, device {args.device} "
        f"({device_name(args.device)}), {os.cpu_count()} CPUs, load avg "
        f"{' / '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(head)
    if skipped:
        print(f"skipped {', '.join(map(str, skipped))} workers: more than 2x the CPUs")
    md = [f"### {head}", ""]
    for paths, label in sets:
        if paths:
            md += bench_set(paths, label, args, workers)
    print(f"\n{time.perf_counter() - t0:.1f} s")
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
