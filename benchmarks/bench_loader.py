"""By-hand loader benchmark: the project's batch op vs sequential, DataLoader, threads and Graphbook
0.13.3.

    python benchmarks/bench_loader.py [--items 800] [--repeats 3] [--only
    throughput,big,compute,memory] [--scale-workers 1,2,4,8,16] [--scale-items N]
    [--gpu-workers 2]

Not a test. One run measures every mode and prints a table per mode (medians and ratios against
the anchors of the same run), then the issue's targets with PASS or MISS:
  throughput  800 JPEGs 256x256 through every configuration (a-f);
  big         the 1024x1024 set (--big-items, default 200), same configurations but Graphbook
              (for reference: the issue sets its targets on the 256x256 set);
  compute     a conv model calibrated to cost about one batch's sequential load: end-to-end vs
              load-only and compute-only (overlap);
  chunks      a stream's chunks of 64 items: pools per chunk vs pools kept for the step;
  memory      peak memory of the project's pools at 800 vs 8000 items;
  scale       (only when named: --only scale; issue 25 part 3) the batch op's process and thread
              pools vs DataLoader (default collate) at 1, 2, 4, 8, 16 loader workers
              (--scale-workers; counts above 2x the CPUs are skipped), --scale-items images
              (default --items), trivial model on the CPU; then, where torch sees CUDA, a model
              on the GPU calibrated to about one batch's sequential load (the bottleneck): the
              GPU's busy time (CUDA events around the model's work) as a share of the batch op's
              wall time, with --gpu-workers loaders, and host-to-device copy times of a stacked
              batch from pinned vs pageable memory. Without CUDA those rows are n/a. On a
              16-core machine, use --scale-items 4000 or more so pool start-up does not dominate.
Each run includes starting and stopping its pool, as one Dagster op run would. Configurations
run interleaved, run by run, so background load on a shared machine hits them alike; the load
average is printed with each table. Images come from benchmarks/.data/.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # the project, importable without installing it

import torch  # noqa: E402
from baselines import (  # noqa: E402
    BATCH_SIZE,
    NUM_WORKERS,
    CudaConvModel,
    Model,
    ResNetModel,
    as_batch,
    calibrated_conv_model,
    calibrated_cuda_model,
    configure,
    load_item,
    measure_round_robin,
    no_model,
    run_dataloader,
    run_sequential,
    run_threads,
    trivial_model,
)
from imageset import make_image_set  # noqa: E402

DATA = HERE / ".data"
GRAPHBOOK_PY = HERE / ".venv-graphbook" / "bin" / "python"

# the project's step base class; the benchmark still imports while the package is being written
try:
    from dagster_graphbook.authoring.steps import BatchStep
except ImportError:
    try:
        from dagster_graphbook.authoring.steps import BatchStep
    except ImportError:
        BatchStep = object


# ---- (f) the project's batch op --------------------------------------------------------------


class ImageBatchStep(BatchStep):
    """A Graphbook-style BatchStep doing the shared per-item work; `model` runs in on_item_batch."""

    load_fn = staticmethod(load_item)

    def __init__(self, model: Model = trivial_model):
        if BatchStep is object:
            self.batch_size, self.item_key = BATCH_SIZE, "path"
        else:
            super().__init__(batch_size=BATCH_SIZE, item_key="path")
        self.model = model

    def on_item_batch(self, outputs, items, notes):
        self.model(outputs)
        return None


class ProjectUnavailable(Exception):
    pass


CHOSEN_NICE: dict = {}  # worker_type -> the worker_nice each default-settings run ended with


def run_project(
    paths: Sequence[str],
    worker_type: str,
    model: Model = trivial_model,
    notes: Optional[list] = None,
    nice: Optional[int] = None,
    num_workers: int = NUM_WORKERS,
    device: str = "cpu",
    batch_size: int = BATCH_SIZE,
):
    """One run of the project's batch op over one note per path; returns its result (raises
    ProjectUnavailable)."""
    try:
        from dagster_graphbook.execution.batch.run import run_batch_step
        from dagster_graphbook.plan.settings import BatchRuntime
    except ImportError as e:
        raise ProjectUnavailable(f"dagster_graphbook.execution.batch.run: {e}") from None
    notes = notes if notes is not None else [{"path": p} for p in paths]
    # the step's default settings but the pool kind (and worker_nice where a row names it)
    chosen = {"worker_nice": nice} if nice is not None else {}
    settings = BatchRuntime(
        num_workers=num_workers, worker_type=worker_type, device=device, **chosen
    )
    step = ImageBatchStep(model)
    step.batch_size = batch_size
    result = run_batch_step(step, notes, settings=settings)
    if nice is None and model is not no_model:  # what the default chose (see compute_bound_mode)
        CHOSEN_NICE.setdefault(worker_type, []).append(result.stats.get("worker_nice"))
    released = sum(len(v) for v in result.outputs.values())
    if released != len(notes) or result.stats["items"] != len(notes):
        raise RuntimeError(
            f"project released {released} notes, stats {result.stats}, expected {len(notes)}"
        )
    return result


# ---- (e) Graphbook, in its own venv ---------------------------------------------------------


def run_graphbook_baseline(
    n: int, size: int, repeats: int, timeout: float
) -> tuple[Optional[dict], str]:
    """Run graphbook_baseline.py with the graphbook venv's python; returns (json or None, why
    not)."""
    if not GRAPHBOOK_PY.exists():
        return None, (
            f"{GRAPHBOOK_PY} missing: python3.11 -m venv benchmarks/.venv-graphbook && "
            "benchmarks/.venv-graphbook/bin/pip install graphbook==0.13.3 "
            "torch==2.14.1 torchvision==0.29.1 pillow"
        )
    cmd = [
        str(GRAPHBOOK_PY),
        str(HERE / "graphbook_baseline.py"),
        "--root",
        str(DATA),
        "--items",
        str(n),
        "--size",
        str(size),
        "--repeats",
        str(repeats),
        "--timeout",
        str(timeout),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=2 * (repeats + 1) * (timeout + 30)
        )
    except subprocess.TimeoutExpired:
        return None, "graphbook baseline timed out"
    if proc.returncode != 0:
        return (
            None,
            f"graphbook baseline failed (rc {proc.returncode}): {proc.stderr.strip()[-500:]}",
        )
    return json.loads(proc.stdout.strip().splitlines()[-1]), ""


# ---- table helpers --------------------------------------------------------------------------


def rate(n: int, times: Optional[list]) -> Optional[float]:
    return n / statistics.median(times) if times else None


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r):
        return "  ".join(
            str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))
        )

    print(fmt(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(fmt(r))


def f2(x: Optional[float], digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def ratio(a: Optional[float], b: Optional[float]) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}x"


# ---- modes ----------------------------------------------------------------------------------

TARGETS: list[list[str]] = []  # [target, measured, PASS/MISS] rows, printed at the end


def target(name: str, value: Optional[float], ok: Optional[bool], fmt: str = "{:.2f}x") -> None:
    TARGETS.append(
        [
            name,
            "n/a" if value is None else fmt.format(value),
            "n/a" if ok is None else "PASS" if ok else "MISS",
        ]
    )


def load_avg() -> str:
    return "load avg " + " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min)"


def throughput_mode(paths, size, args, with_graphbook: bool = True) -> None:
    n, R, T = len(paths), args.repeats, args.timeout
    configs = [
        ("a", "sequential (1 process)", lambda: run_sequential(paths)),
        (
            "b",
            "DataLoader w=2, collate=list",
            lambda: run_dataloader(paths, stack=False, timeout=T),
        ),
        (
            "c",
            "DataLoader w=2, default collate",
            lambda: run_dataloader(paths, stack=True, timeout=T),
        ),
        ("d", "ThreadPoolExecutor 2 threads", lambda: run_threads(paths, timeout=T)),
        ("f", "dagster-graphbook batch op, process pool", lambda: run_project(paths, "process")),
        ("f", "dagster-graphbook batch op, thread pool", lambda: run_project(paths, "thread")),
    ]
    print(
        "  running "
        + ", ".join(label for k, label, _ in configs if k in args.configs)
        + " (interleaved) ...",
        file=sys.stderr,
        flush=True,
    )
    cpu: dict = {}
    measured = measure_round_robin(
        {label: run for k, label, run in configs if k in args.configs}, R, T, cpu
    )
    results, notes = {}, []
    for label, times in measured.items():
        results[label] = None if isinstance(times, BaseException) else times
        if isinstance(times, BaseException):
            notes.append(
                f"{label}: n/a ({times if isinstance(times, ProjectUnavailable) else repr(times)})"
            )
    gb_label = "Graphbook 0.13.3 Dataloader w=2"
    if "e" in args.configs and with_graphbook:
        print(f"  running {gb_label} (subprocess) ...", file=sys.stderr, flush=True)
        gb, why = run_graphbook_baseline(n, size, args.gb_repeats, T)
        results[gb_label] = gb and gb["pool_times"]
        if gb:
            notes.append(
                f"{gb_label}: its venv has pillow {gb['pillow']}; sequential there = "
                f"{gb['sequential_items_per_s']:.1f} items/s, pool/sequential (same venv) = "
                f"{gb['pool_items_per_s'] / gb['sequential_items_per_s']:.3f}x"
            )
        else:
            notes.append(f"{gb_label}: n/a ({why})")

    rates = {k: rate(n, v) for k, v in results.items()}
    seq, dl_stack = rates.get(configs[0][1]), rates.get(configs[2][1])
    dl_list, gbr = rates.get(configs[1][1]), rates.get(gb_label)
    order = [c[1] for c in configs[:4]] + [gb_label] + [c[1] for c in configs[4:]]
    rows = []
    cpu_ms_of = {k: 1e3 * statistics.median(v) / n for k, v in cpu.items() if v}
    seq_cpu = cpu_ms_of.get(configs[0][1])
    for label in (c for c in order if c in rates):
        r, times = rates[label], results[label]
        cpu_ms = cpu_ms_of.get(label)
        # the share of the ideal this configuration's CPU cost allows with every core busy
        ceiling = seq_cpu / cpu_ms if seq_cpu and cpu_ms and label != configs[0][1] else None
        rows.append(
            [
                label,
                f2(r, 1),
                f2(n / max(times), 1) if times else "n/a",
                f2(n / min(times), 1) if times else "n/a",
                ratio(r, seq),
                ratio(r, dl_stack),
                ratio(r, dl_list),
                ratio(r, gbr),
                f2(r / (2 * seq) if r and seq else None),
                f2(cpu_ms),
                f2(ceiling),
                f2(r / (2 * seq) / ceiling if r and seq and ceiling else None),
            ]
        )
    print(
        f"\nThroughput: {n} JPEGs {size}x{size} -> 224x224 tensors, batch "
        f"{BATCH_SIZE}, {NUM_WORKERS} workers, "
        f"median of {R} runs after 1 warm-up (Graphbook: {args.gb_repeats}), "
        f"{os.cpu_count()} CPUs, {load_avg()} at end"
    )
    print_table(
        [
            "configuration",
            "items/s",
            "min",
            "max",
            "vs seq",
            "vs DL stack",
            "vs DL list",
            "vs Graphbook",
            "frac of ideal (2x seq)",
            "CPU ms/item",
            "CPU ceiling",
            "core use",
        ],
        rows,
    )
    print(
        "  * CPU ms/item: CPU time of the run (step process, its threads and pool "
        "workers) per item, median;"
        " unlike items/s it hardly depends on what else the machine runs\n"
        "  * CPU ceiling: sequential's CPU ms/item over this row's, the frac of ideal its CPU cost"
        " allows with both cores busy; core use: frac of ideal / CPU ceiling (1.00: no core"
        " idle). A frac of ideal short of its goal is extra CPU where the ceiling is low, idle"
        " cores where core use is"
    )
    for line in notes:
        print("  * " + line)
    if not with_graphbook:
        # the targets are set on the 256x256 set; the 1024x1024 table is for reference
        return
    proc, thr = rates.get(configs[4][1]), rates.get(configs[5][1])
    tag = f"{size}px"
    target(
        f"{tag}: process pool >= 1.0x DataLoader stacked",
        proc / dl_stack if proc and dl_stack else None,
        proc >= dl_stack if proc and dl_stack else None,
    )
    target(
        f"{tag}: process pool >= 1.5x DataLoader list collate",
        proc / dl_list if proc and dl_list else None,
        proc >= 1.5 * dl_list if proc and dl_list else None,
    )
    for label, r, goal in (("process", proc, 0.9), ("thread", thr, 0.95)):
        target(
            f"{tag}: {label} pool >= {goal} of ideal (2x sequential)",
            r / (2 * seq) if r and seq else None,
            r >= goal * 2 * seq if r and seq else None,
            "{:.2f}",
        )
    for label, r in (("process", proc), ("thread", thr)):
        target(
            f"{tag}: {label} pool >= 10x Graphbook 0.13.3 pool",
            r / gbr if r and gbr else None,
            r >= 10 * gbr if r and gbr else None,
        )


def compute_bound_mode(paths, args) -> None:
    n, R, T = len(paths), args.repeats, args.timeout
    model, load_s, compute_s = calibrated_conv_model(paths)
    print(
        f"\nCompute-bound: ConvModel x{model.reps} = {compute_s * 1e3:.1f} ms/batch "
        "vs sequential load "
        f"{load_s * 1e3:.1f} ms/batch when calibrated ({n} items, median of {R} "
        "interleaved runs after 1 warm-up)"
    )
    batches = [
        as_batch([load_item(p) for p in paths[i : i + BATCH_SIZE]])
        for i in range(0, min(n, 800), BATCH_SIZE)
    ]
    n_batches = -(-n // BATCH_SIZE)

    def compute_only():
        for i in range(n_batches):
            model(batches[i % len(batches)])

    configs = [
        ("sequential (no overlap)", lambda m: run_sequential(paths, m)),
        ("DataLoader w=2, default collate", lambda m: run_dataloader(paths, True, m, timeout=T)),
        ("dagster-graphbook batch op, process pool", lambda m: run_project(paths, "process", m)),
        ("dagster-graphbook batch op, thread pool", lambda m: run_project(paths, "thread", m)),
        (
            "batch op, process pool, worker_nice=0",
            lambda m: run_project(paths, "process", m, nice=0),
        ),
        ("batch op, thread pool, worker_nice=0", lambda m: run_project(paths, "thread", m, nice=0)),
    ]
    # the worker_nice=0 rows (the default before it was chosen from the batch cost) use the
    # load-only time of the default rows: with no model the two are the same settings
    anchor = {configs[4][0]: configs[2][0], configs[5][0]: configs[3][0]}
    runs = {"compute-only": compute_only}
    for label, run in configs:
        runs[f"{label} | e2e"] = lambda run=run: run(model)
        if label not in anchor:
            runs[f"{label} | load"] = lambda run=run: run(no_model)
    print(
        "  running compute-only, end-to-end and load-only runs (interleaved) ...",
        file=sys.stderr,
        flush=True,
    )
    CHOSEN_NICE.clear()
    measured = measure_round_robin(runs, R, T)
    failed = {k: v for k, v in measured.items() if isinstance(v, BaseException)}
    rates = {k: None if k in failed else rate(n, v) for k, v in measured.items()}
    compute_rate = rates["compute-only"]
    rows, notes = (
        [],
        [f"{k}: n/a ({v!r})" for k, v in failed.items() if not isinstance(v, ProjectUnavailable)],
    )
    notes += sorted(
        {
            f"{k.split(' | ')[0]}: n/a ({v})"
            for k, v in failed.items()
            if isinstance(v, ProjectUnavailable)
        }
    )
    overlap = {}
    for label, _ in configs:
        e2e_r, load_r = rates[f"{label} | e2e"], rates[f"{anchor.get(label, label)} | load"]
        bound = min(load_r, compute_rate) if load_r and compute_rate else None
        overlap[label] = bound / e2e_r if bound and e2e_r else None
        rows.append([label, f2(e2e_r, 1), f2(load_r, 1), f2(compute_rate, 1), f2(overlap[label])])
    seq_load = rates[f"{configs[0][0]} | load"]
    floor: dict = {}
    if seq_load and compute_rate:
        # CPU-seconds per item (one-core load + one-core model) spread over every core: no schedule
        # does better
        best = (os.cpu_count() or 1) / (1 / seq_load + 1 / compute_rate)
        floor = {
            label: max(
                1.0, min(rates[f"{anchor.get(label, label)} | load"] or 0, compute_rate) / best
            )
            for label, _ in configs[2:]
        }
        print(
            f"  CPU floor: load ({1e3 / seq_load:.2f} ms/item on one core) + model "
            f"({1e3 / compute_rate:.2f} ms/item) on "
            f"{os.cpu_count()} cores allow at most {best:.0f} it/s end-to-end: the "
            "ratio cannot go below "
            + ", ".join(
                f"{v:.2f} ({k.replace('dagster-graphbook ', '').replace('batch op, ', '')})"
                for k, v in floor.items()
            )
        )
    print(f"  {load_avg()} at end")
    print_table(
        [
            "configuration",
            "end-to-end it/s",
            "load-only it/s",
            "compute-only it/s",
            "t_e2e / max(t_load, t_compute)",
        ],
        rows,
    )
    print(
        "  * 1.00 = loading fully hidden behind compute; 2.00 = no overlap at all; "
        "worker_nice=0 rows use the load-only time of the default rows"
    )
    print(
        "  * default settings choose worker_nice from the first batches (10 when on_item_batch "
        "takes more than half the step's time); their end-to-end runs ended at "
        + ", ".join(f"{k} {v}" for k, v in CHOSEN_NICE.items())
        + "; the worker_nice=0 rows show equal priority"
    )
    for label, kind in ((configs[2][0], "process"), (configs[3][0], "thread")):
        v, f = overlap.get(label), floor.get(label)
        target(
            f"compute-bound: {kind} pool end-to-end <= 1.2 x max(load-only, compute-only)",
            v,
            v <= 1.2 if v else None,
            "{:.2f}",
        )
        target(
            f"compute-bound: {kind} pool ratio <= 1.1 x its CPU floor ({f2(f)})",
            v / f if v and f else None,
            v <= 1.1 * f if v and f else None,
        )
    for line in notes:
        print("  * " + line)


def chunks_mode(paths, args) -> None:
    """A streamed batch step runs once per chunk of ``queue_items`` items: the same images in one
    run, in chunks of 64 with new pools per chunk (as streams did before issue 25), and in chunks
    of 64 and 256 with the step's pools kept (``BatchPools(keep=True)``, as streams do now)."""
    try:
        from dagster_graphbook.execution.batch.run import run_batch_step
        from dagster_graphbook.execution.pools.batch_pools import BatchPools
        from dagster_graphbook.plan.settings import BatchRuntime
    except ImportError as e:
        print(f"\nChunks: n/a ({e})")
        return
    n, settings = len(paths), BatchRuntime(num_workers=NUM_WORKERS, device="cpu")

    def chunked(size: int, keep: bool):
        def run():
            pools = BatchPools(keep=True) if keep else None
            try:
                for i in range(0, n, size):
                    notes = [{"path": p} for p in paths[i : i + size]]
                    run_batch_step(ImageBatchStep(), notes, settings=settings, pools=pools)
            finally:
                if pools is not None:
                    pools.close()

        return run

    configs = {
        "one run (the default mode)": chunked(n, False),
        "chunks of 64, pools per chunk (before)": chunked(64, False),
        "chunks of 64, pools kept (streams now)": chunked(64, True),
        "chunks of 256, pools kept": chunked(256, True),
    }
    print("  running chunked runs (interleaved) ...", file=sys.stderr, flush=True)
    measured = measure_round_robin(configs, args.repeats, args.timeout)
    rates = {k: None if isinstance(v, BaseException) else rate(n, v) for k, v in measured.items()}
    whole = rates["one run (the default mode)"]
    print(
        f"\nChunks: {n} JPEGs 256x256 through the process pool, {NUM_WORKERS} workers, batch "
        f"{BATCH_SIZE}, median of {args.repeats} interleaved runs ({load_avg()})"
    )
    print_table(
        ["configuration", "items/s", "vs one run"],
        [[k, f2(r, 1), ratio(r, whole)] for k, r in rates.items()],
    )
    kept = rates["chunks of 64, pools kept (streams now)"]
    target(
        "streams: chunks of 64 with kept pools >= 0.8x one run",
        kept / whole if kept and whole else None,
        kept >= 0.8 * whole if kept and whole else None,
    )


def _tree_pids(pid: int) -> list[int]:
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            pids += [p for c in (task / "children").read_text().split() for p in _tree_pids(int(c))]
        except OSError:
            pass
    return pids


def tree_memory() -> tuple[int, int]:
    """(RSS, PSS) in bytes summed over this process and all its descendants, from
    /proc/*/smaps_rollup."""
    rss = pss = 0
    for pid in _tree_pids(os.getpid()):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return rss, pss


class PeakSampler(threading.Thread):
    """Samples tree_memory() every `interval` s until stopped; keeps the peaks."""

    def __init__(self, interval: float = 0.02):
        super().__init__(daemon=True)
        self.interval, self.peak, self._done = interval, (0, 0), threading.Event()

    def run(self):
        while not self._done.is_set():
            rss, pss = tree_memory()
            self.peak = (max(self.peak[0], rss), max(self.peak[1], pss))
            self._done.wait(self.interval)

    def __exit__(self, *exc):
        self._done.set()
        self.join()

    def __enter__(self):
        self.start()
        return self


def memory_mode(args) -> None:
    """Peak memory of the whole process tree while one run goes over 800, then 8000 items.

    "Notes excluded": the notes list is built before the run and its own size (the memory it
    added) is subtracted, so what is compared is the run's footprint, not the input's.
    """
    sizes = (800, 8000)
    sets = {k: make_image_set(DATA, k, 256) for k in sizes}
    configs = [
        (
            "dagster-graphbook batch op, process pool",
            lambda p, notes: run_project(p, "process", notes=notes),
        ),
        (
            "dagster-graphbook batch op, thread pool",
            lambda p, notes: run_project(p, "thread", notes=notes),
        ),
        (
            "DataLoader w=2, default collate (reference)",
            lambda p, notes: run_dataloader(p, True, timeout=args.timeout),
        ),
    ]
    mib = lambda b: f"{b / 2**20:.0f}"  # noqa: E731
    rows, notes_out = [], []
    for label, run in configs:
        peaks = {}
        try:
            run(
                sets[800][:80], [{"path": p} for p in sets[800][:80]]
            )  # warm-up: imports, first fork
            for k in sizes:
                gc.collect()
                empty = tree_memory()
                notes = [{"path": p} for p in sets[k]]
                built = tree_memory()
                with PeakSampler() as sampler:
                    run(sets[k], notes)
                notes_size = (max(0, built[0] - empty[0]), max(0, built[1] - empty[1]))
                peaks[k] = (
                    sampler.peak[0] - notes_size[0],
                    sampler.peak[1] - notes_size[1],
                    sampler.peak[0] - built[0],
                )
                del notes
        except Exception as e:
            notes_out.append(f"{label}: n/a ({type(e).__name__}: {e})")
            rows.append([label] + ["n/a"] * 8)
            continue
        (r8, p8, g8), (r80, p80, g80) = peaks[800], peaks[8000]
        rows.append(
            [
                label,
                mib(r8),
                mib(r80),
                ratio(r80, r8),
                mib(g8),
                mib(g80),
                mib(p8),
                mib(p80),
                ratio(p80, p8),
            ]
        )
        if "reference" not in label:
            kind = "process" if "process" in label else "thread"
            target(
                f"memory: {kind} pool peak RSS @8000 <= 1.3x @800 (notes excluded)",
                r80 / r8,
                r80 <= 1.3 * r8,
            )
    print(
        "\nMemory: peak of main process + all its children during one run, notes "
        f"excluded, MiB ({load_avg()})"
    )
    print_table(
        [
            "configuration",
            "RSS @800",
            "RSS @8000",
            "ratio",
            "growth @800",
            "growth @8000",
            "PSS @800",
            "PSS @8000",
            "ratio",
        ],
        rows,
    )
    print(
        "  * RSS sums count pages shared with forked children once per process; PSS "
        "splits them between them"
    )
    print("  * growth = peak minus the memory before the run (after the notes were built)")
    for line in notes_out:
        print("  * " + line)


# ---- scale: loader workers, and the GPU (issue 25, part 3) -----------------------------------

H2D_SHAPES = ((BATCH_SIZE, 3, 224, 224), (64, 3, 224, 224))  # one stacked batch, and a bigger one
H2D_COPIES = 50
GPU_BUSY_GOAL = 0.9
GPU_BUSY_TARGET = (
    "scale: GPU busy >= 90% of the batch op's wall time when the model is the bottleneck"
)


def scale_worker_counts(spec: str) -> tuple[list[int], list[int]]:
    """(worker counts to run, counts skipped for being above 2x this machine's CPUs)."""
    asked = [int(w) for w in spec.split(",") if w.strip()]
    cap = 2 * (os.cpu_count() or 1)
    return [w for w in asked if w <= cap], [w for w in asked if w > cap]


def scale_mode(paths, args) -> None:
    """The batch op's pools against DataLoader (default collate) at each worker count, I/O-bound
    (trivial model, device cpu); then the GPU rows (gpu_rows)."""
    if args.gpu_only:
        print("\nScale: the CPU rows skipped (--gpu-only)")
        gpu_rows(paths, args)
        return
    n, R, T = len(paths), args.repeats, args.timeout
    counts, skipped = scale_worker_counts(args.scale_workers)
    kinds = (
        ("process", lambda w: lambda: run_project(paths, "process", num_workers=w)),
        ("thread", lambda w: lambda: run_project(paths, "thread", num_workers=w)),
        (
            "DataLoader",
            lambda w: lambda: run_dataloader(paths, True, timeout=T, num_workers=w),
        ),
    )
    notes = []
    if skipped:
        notes.append(
            f"skipped {', '.join(map(str, skipped))} workers: more than 2x this machine's "
            f"{os.cpu_count()} CPUs"
        )
    rates: dict = {}
    if counts:
        print(
            "  running batch op (process and thread pools) and DataLoader at "
            f"{', '.join(map(str, counts))} workers (interleaved) ...",
            file=sys.stderr,
            flush=True,
        )
        runs = {f"{kind} w={w}": make(w) for w in counts for kind, make in kinds}
        for label, times in measure_round_robin(runs, R, T).items():
            rates[label] = None if isinstance(times, BaseException) else rate(n, times)
            if isinstance(times, BaseException):
                why = times if isinstance(times, ProjectUnavailable) else repr(times)
                notes.append(f"{label}: n/a ({why})")
    rows, lowest = [], None
    base = counts[0] if counts else None
    for w in counts:
        proc, thr, dl = (rates.get(f"{kind} w={w}") for kind, _ in kinds)
        rows.append(
            [
                str(w),
                f2(proc, 1),
                f2(thr, 1),
                f2(dl, 1),
                ratio(proc, dl),
                ratio(thr, dl),
                ratio(proc, rates.get(f"process w={base}")),
                ratio(dl, rates.get(f"DataLoader w={base}")),
            ]
        )
        if proc and dl:
            lowest = min(lowest or proc / dl, proc / dl)
    print(
        f"\nScale: {n} JPEGs 256x256 -> 224x224 tensors, batch {BATCH_SIZE}, trivial model, "
        f"device cpu, median of {R} interleaved runs after 1 warm-up, {os.cpu_count()} CPUs, "
        f"{load_avg()} at end"
    )
    print_table(
        [
            "workers",
            "batch op process it/s",
            "batch op thread it/s",
            "DataLoader (stack) it/s",
            "process / DL",
            "thread / DL",
            f"process vs w={base}",
            f"DL vs w={base}",
        ],
        rows,
    )
    for line in notes:
        print("  * " + line)
    target(
        "scale: process pool >= 1.0x DataLoader stacked at every worker count (lowest)",
        lowest,
        lowest >= 1.0 if lowest else None,
    )
    gpu_rows(paths, args)


def gpu_rows(paths, args) -> None:
    """On CUDA: GPU busy share of the batch op's wall time with a model that is the bottleneck,
    and host-to-device copy times from pinned vs pageable memory."""
    if not torch.cuda.is_available():
        print(
            "\nGPU: n/a (no CUDA device): the GPU busy share, host-to-device copy and ResNet "
            "rows need one"
        )
        for kind in ("process", "thread"):
            target(f"{GPU_BUSY_TARGET} ({kind} pool)", None, None)
        return
    n, R, T, w = len(paths), args.repeats, args.timeout, args.gpu_workers
    model, load_s, gpu_s = calibrated_cuda_model(paths)
    models = {False: model, True: CudaConvModel("cuda", model.reps, sync_each_batch=True)}
    configs = (
        (
            "batch op, process pool",
            lambda m: run_project(paths, "process", m, num_workers=w, device="cuda"),
        ),
        (
            "batch op, thread pool",
            lambda m: run_project(paths, "thread", m, num_workers=w, device="cuda"),
        ),
        (
            "DataLoader (stack), pin_memory (reference)",
            lambda m: run_dataloader(paths, True, m, timeout=T, num_workers=w, pin_memory=True),
        ),
    )
    # label -> [(GPU busy s, wall s of the run, wall s from the model's first call), ...]
    spans: dict = {}

    def timed(label, m, go):
        def run():
            m.reset()
            t0 = time.perf_counter()
            go(m)
            busy = m.busy_s()  # synchronizes: the run's wall time includes the queued GPU work
            end = time.perf_counter()
            spans.setdefault(label, []).append((busy, end - t0, end - m.first_call))

        return run

    runs = {}
    for sync in (False, True):
        for label, go in configs:
            key = (label, "read back each batch" if sync else "stay on the GPU")
            runs[key] = timed(key, models[sync], go)
    print(
        f"  running the GPU model ({w} loader workers, interleaved) ...",
        file=sys.stderr,
        flush=True,
    )
    measured = measure_round_robin(runs, R, T)
    rows, notes, busy = [], [], {}
    for key, times in measured.items():
        label, outputs = key
        if isinstance(times, BaseException):
            why = times if isinstance(times, ProjectUnavailable) else repr(times)
            notes.append(f"{label}, outputs {outputs}: n/a ({why})")
            rows.append([label, outputs] + ["n/a"] * 4)
            continue
        done = spans[key][1:]  # the first was the warm-up
        share = statistics.median(b / wall for b, wall, _ in done)
        steady = statistics.median(b / since for b, _, since in done)
        busy[key] = share
        rows.append(
            [
                label,
                outputs,
                f2(rate(n, times), 1),
                f2(1e3 * statistics.median(b for b, _, _ in done) / -(-n // BATCH_SIZE)),
                f"{share:.1%}",
                f"{steady:.1%}",
            ]
        )
    print(
        f"\nGPU: {torch.cuda.get_device_name()}, CudaConvModel x{model.reps} = "
        f"{gpu_s * 1e3:.1f} ms GPU/batch vs sequential load {load_s * 1e3:.1f} ms/batch "
        f"({w} workers load a batch every ~{load_s / w * 1e3:.1f} ms: "
        f"{'the model is' if gpu_s > load_s / w else 'NOT the model but the loaders may be'} "
        f"the bottleneck), {n} items, device cuda, median of {R} interleaved runs after 1 warm-up"
    )
    print_table(
        [
            "configuration",
            "model outputs",
            "it/s",
            "GPU ms/batch",
            "GPU busy / op wall",
            "GPU busy / wall from 1st batch",
        ],
        rows,
    )
    print(
        "  * GPU busy: CUDA event pairs around the model's work in each batch, summed; op wall: "
        "the whole run (pool start and stop, the final synchronize); from 1st batch: from the "
        "model's first call"
    )
    for line in notes:
        print("  * " + line)
    for kind in ("process", "thread"):
        share = busy.get((f"batch op, {kind} pool", "stay on the GPU"))
        target(
            f"{GPU_BUSY_TARGET} ({kind} pool)",
            share,
            share >= GPU_BUSY_GOAL if share is not None else None,
            "{:.1%}",
        )
    h2d_copy_table()
    resnet_rows(paths, args)


def resnet_rows(paths, args) -> None:
    """A real model on the GPU (torchvision ResNet, random weights, bf16 autocast, channels-last,
    batch --resnet-batch) behind the batch op's process pool at each worker count: items/s and
    the GPU's busy share, against the model alone on a batch already on the GPU (the ceiling)."""
    counts, skipped = scale_worker_counts(args.resnet_workers)
    n, R, T, bs = len(paths), args.repeats, args.timeout, args.resnet_batch
    model = ResNetModel(args.resnet_arch)
    resident = torch.rand(bs, 3, 224, 224, device="cuda")
    for _ in range(3):  # warm-up: cuDNN's choice of kernels
        model(resident)
    model.reset()
    t0 = time.perf_counter()
    batches = max(1, n // bs)
    for _ in range(batches):
        model(resident)
    alone = batches * bs / (model.busy_s() or float("nan"))
    wall_alone = batches * bs / (time.perf_counter() - t0)
    spans: dict = {}

    def timed(w):
        def run():
            model.reset()
            t0 = time.perf_counter()
            run_project(paths, "process", model, num_workers=w, device="cuda", batch_size=bs)
            busy = model.busy_s()
            spans.setdefault(w, []).append((busy, time.perf_counter() - t0))

        return run

    print(
        f"  running {args.resnet_arch} behind the process pool at "
        f"{', '.join(map(str, counts))} workers (interleaved) ...",
        file=sys.stderr,
        flush=True,
    )
    measured = measure_round_robin({w: timed(w) for w in counts}, R, T)
    rows = []
    for w, times in measured.items():
        if isinstance(times, BaseException):
            rows.append([str(w), "n/a", "n/a", "n/a", repr(times)[:60]])
            continue
        its = rate(n, times)
        share = statistics.median(b / wall for b, wall in spans[w][1:])
        rows.append([str(w), f2(its, 1), f"{share:.1%}", ratio(its, alone), ""])
    print(
        f"\n{args.resnet_arch} on {torch.cuda.get_device_name()} (bf16 autocast, channels-last, "
        f"random weights), batch {bs}, {n} JPEGs 256x256 decoded and resized to 224 in the "
        f"loader workers, median of {R} interleaved runs after 1 warm-up; the model alone on a "
        f"resident batch: {alone:.0f} it/s of GPU time ({wall_alone:.0f} it/s wall)"
    )
    print_table(
        ["loader workers", "batch op it/s", "GPU busy / op wall", "vs model alone", ""], rows
    )
    if skipped:
        print(f"  * skipped {', '.join(map(str, skipped))} workers: more than 2x the CPUs")


def h2d_copy_table(copies: int = H2D_COPIES) -> None:
    """Median time of one host-to-device copy of a stacked float32 batch, from pageable and from
    pinned memory (CUDA events, each copy synchronized before the next)."""
    rows = []
    for shape in H2D_SHAPES:
        dst = torch.empty(shape, device="cuda")
        ms = {}
        for kind in ("pageable", "pinned"):
            src = torch.rand(shape)
            src = src.pin_memory() if kind == "pinned" else src
            elapsed = []
            for _ in range(copies + 1):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                dst.copy_(src, non_blocking=True)
                end.record()
                torch.cuda.synchronize()
                elapsed.append(start.elapsed_time(end))
            ms[kind] = statistics.median(elapsed[1:])  # the first was the warm-up
        size = dst.numel() * dst.element_size()
        rows.append(
            [
                "x".join(map(str, shape)),
                f"{size / 2**20:.1f}",
                f"{ms['pageable']:.3f}",
                f"{ms['pinned']:.3f}",
                f"{size / ms['pageable'] / 1e6:.1f}",
                f"{size / ms['pinned'] / 1e6:.1f}",
                ratio(ms["pageable"], ms["pinned"]),
            ]
        )
    print(f"\nHost-to-device copy of one float32 batch, median of {copies} copies (CUDA events)")
    print_table(
        [
            "batch",
            "MiB",
            "pageable ms",
            "pinned ms",
            "pageable GB/s",
            "pinned GB/s",
            "pinned speedup",
        ],
        rows,
    )


MODES = ("throughput", "big", "compute", "chunks", "memory", "scale")
DEFAULT_MODES = ("throughput", "big", "compute", "chunks", "memory")  # scale: --only scale


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--items",
        type=int,
        default=800,
        help="images of the 256x256 set for throughput and compute",
    )
    ap.add_argument("--big-items", type=int, default=200, help="images of the 1024x1024 set")
    ap.add_argument(
        "--repeats", type=int, default=3, help="timed runs per configuration, after one warm-up"
    )
    ap.add_argument(
        "--gb-repeats",
        type=int,
        default=1,
        help="timed runs of Graphbook's pool (slow: about 30 s per 800 items)",
    )
    ap.add_argument(
        "--timeout", type=float, default=300, help="seconds per run before it is abandoned"
    )
    ap.add_argument(
        "--configs", default="a,b,c,d,e,f", help="throughput configurations to run (letters a-f)"
    )
    ap.add_argument(
        "--only",
        default=",".join(DEFAULT_MODES),
        help=f"modes to run (comma-separated: {', '.join(MODES)}; default "
        f"{','.join(DEFAULT_MODES)})",
    )
    ap.add_argument(
        "--scale-workers",
        default="1,2,4,8,16",
        help="scale: loader worker counts (counts above 2x the CPUs are skipped)",
    )
    ap.add_argument(
        "--scale-items",
        type=int,
        default=None,
        help="scale: images of the 256x256 set (default: --items)",
    )
    ap.add_argument(
        "--gpu-workers",
        type=int,
        default=NUM_WORKERS,
        help="scale: loader workers of the GPU runs (CUDA only)",
    )
    ap.add_argument(
        "--resnet-workers",
        default="1,2,4,8,16",
        help="scale, CUDA only: loader worker counts of the ResNet rows",
    )
    ap.add_argument(
        "--gpu-only",
        action="store_true",
        help="scale: only the GPU rows (a lent GPU's minutes are few)",
    )
    ap.add_argument("--resnet-arch", default="resnet50", help="scale, CUDA only: the model")
    ap.add_argument("--resnet-batch", type=int, default=64, help="scale, CUDA only: batch size")
    args = ap.parse_args()
    args.configs = set(args.configs.split(","))
    modes = [m for m in args.only.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(sorted(unknown))}; choose from {', '.join(MODES)}")
    configure()
    print(
        f"bench_loader: {os.cpu_count()} CPUs, torch {torch.__version__}, {load_avg()} at start",
        flush=True,
    )
    if {"throughput", "compute", "chunks"} & set(modes):
        print(
            f"  preparing {args.items} images 256x256 under {DATA} ...", file=sys.stderr, flush=True
        )
        paths = make_image_set(DATA, args.items, 256)
    if "throughput" in modes:
        throughput_mode(paths, 256, args)
    if "big" in modes:
        print(
            f"  preparing {args.big_items} images 1024x1024 under {DATA} ...",
            file=sys.stderr,
            flush=True,
        )
        throughput_mode(
            make_image_set(DATA, args.big_items, 1024), 1024, args, with_graphbook=False
        )
    if "compute" in modes:
        compute_bound_mode(paths, args)
    if "chunks" in modes:
        chunks_mode(paths, args)
    if "memory" in modes:
        memory_mode(args)
    if "scale" in modes:
        # last: the GPU rows start CUDA in this process, which the other modes' forks never see
        n = args.scale_items or args.items
        print(f"  preparing {n} images 256x256 under {DATA} ...", file=sys.stderr, flush=True)
        scale_mode(make_image_set(DATA, n, 256), args)
    print(f"\nTargets (issues 3 and 25; ratios from this run, {load_avg()} at end)")
    print_table(["target", "measured", "result"], TARGETS)


if __name__ == "__main__":
    main()
