"""Integrity figures (issue 11), printed as tables; run by hand:

    .venv/bin/python benchmarks/bench_integrity.py [--notes-dir .dagster_home/storage/graphbook]

1. Time to detect and report a hung ``load_fn``/``dump_fn`` call (``runtime.call_timeout_s``):
   from the start of the step to the item error naming the item.
2. Time for SIGINT/SIGTERM to end a CLI run whose ``load_fn`` hangs (thread pool: stuck in
   ``time.sleep``, which cannot be interrupted; process workers).
3. Storage cost of versioned notes: bytes of one version (one run) per asset and partition, and
   what ``notes_keep`` versions cost, read from a notes folder (run ``bash scripts/demo.sh`` first).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from dagster_graphbook.authoring.steps import BatchStep  # noqa: E402
from dagster_graphbook.execution.batch.run import run_batch_step  # noqa: E402
from dagster_graphbook.plan.settings import BatchRuntime  # noqa: E402

HANG = "stalled/item"


class HangLoad(BatchStep):
    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        if item == HANG:
            time.sleep(3600)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None


class HangDump(BatchStep):
    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def dump_fn(item):
        if item == HANG:
            time.sleep(3600)

    def on_item_batch(self, outputs, items, notes):
        return [(i,) for i in items]


def hung_calls() -> None:
    print("\n1. hung call -> item error naming the item (process workers, on_item_error: skip)")
    print(f"{'call':<8} {'call_timeout_s':>14} {'seconds to error':>17} {'error names item':>17}")
    run_batch_step(
        HangLoad(),
        [{"items": ["warm", "up"]}],
        BatchRuntime(num_workers=2, device="cpu", stall_warning_s=0),
    )  # torch import
    for cls, what in ((HangLoad, "load_fn"), (HangDump, "dump_fn")):
        for limit in (1.0, 5.0):
            notes = [{"items": ["a", "b", HANG, "c"]}]
            start = time.perf_counter()
            result = run_batch_step(
                cls(),
                notes,
                BatchRuntime(
                    num_workers=2,
                    device="cpu",
                    on_item_error="skip",
                    call_timeout_s=limit,
                    stall_warning_s=0,
                ),
            )
            seconds = time.perf_counter() - start
            named = bool(result.errors) and HANG in result.errors[0].item
            print(f"{what:<8} {limit:>14.1f} {seconds:>17.2f} {str(named):>17}")


NODES = """
import time
from graphbook.steps import SourceStep, BatchStep

class Items(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}
    def load(self):
        return {"out": [{"items": ["a", "b", "c", "d"]}]}

class Stuck(BatchStep):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 2},
        "item_key": {"type": "string", "default": "items"},
    }
    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)
    @staticmethod
    def load_fn(item):
        print("LOADING", item, flush=True)
        time.sleep(3600)
    def on_item_batch(self, outputs, items, notes):
        return None
"""


def signals() -> None:
    from tests.support.workflows import edge, step_node, write_nodes, write_workflow

    print("\n2. signal -> CLI run with a hung load_fn ends (seconds from the signal to exit)")
    print(f"{'workers':<8} {'signal':<8} {'seconds':>8} {'exit':>5} {'run status':>11}")
    import dagster as dg

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        nodes = write_nodes(root / "nodes", "stuck_nodes.py", textwrap.dedent(NODES))
        wf = write_workflow(
            root,
            "stuck",
            [
                step_node("0", "Items", {}, source=True),
                step_node("1", "Stuck", {"batch_size": 2, "item_key": "items"}),
            ],
            [edge("0", "out", "1")],
        )
        for worker_type in ("thread", "process"):
            for sig in (signal.SIGINT, signal.SIGTERM):
                home = root / f"home_{worker_type}_{sig.name}"
                cmd = [
                    sys.executable,
                    "-m",
                    "dagster_graphbook.cli",
                    "run",
                    str(wf),
                    "--custom-nodes",
                    str(nodes),
                    "--dagster-home",
                    str(home),
                    "--set",
                    f"Stuck.runtime.worker_type={worker_type}",
                    "--set",
                    "Stuck.runtime.num_workers=1",
                    "--no-progress",
                ]
                proc = subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
                for line in proc.stdout:
                    if "LOADING" in line:
                        break
                start = time.monotonic()
                proc.send_signal(sig)
                try:
                    proc.communicate(timeout=60)
                    seconds = f"{time.monotonic() - start:.2f}"
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    seconds = ">60"
                with dg.DagsterInstance.from_config(str(home)) as instance:
                    status = instance.get_runs()[0].status.value
                print(
                    f"{worker_type:<8} {sig.name:<8} {seconds:>8} {proc.returncode:>5} {status:>11}"
                )


def storage(notes_dir: Path, keep: int) -> None:
    print(f"\n3. versioned notes in {notes_dir}")
    if not notes_dir.is_dir():
        print("   (no notes folder: run `bash scripts/demo.sh` first)")
        return
    per_version = defaultdict(int)  # run id -> bytes of its versions (notes and tables)
    folders = set()
    for path in notes_dir.rglob("*"):
        if path.is_file() and not path.name.startswith("."):
            per_version[path.stem] += path.stat().st_size
            folders.add(path.parent)
    if not per_version:
        print("   (empty)")
        return
    total = sum(per_version.values())
    print(f"{'run (version)':<38} {'bytes':>10}")
    for run_id, size in sorted(per_version.items(), key=lambda kv: kv[1]):
        print(f"{run_id:<38} {size:>10}")
    one = max(per_version.values())
    print(f"{'asset/partition folders':<38} {len(folders):>10}")
    print(f"{'total on disk':<38} {total:>10}")
    print(f"{'one run (largest version set)':<38} {one:>10}")
    print(f"{f'bound with notes_keep={keep}':<38} {one * keep:>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--notes-dir",
        default=str(REPO / ".dagster_home" / "storage" / "graphbook" / "nightly_shapes"),
    )
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=["hung", "signals", "storage"])
    args = parser.parse_args()
    if "hung" not in args.skip:
        hung_calls()
    if "signals" not in args.skip:
        signals()
    if "storage" not in args.skip:
        storage(Path(args.notes_dir), args.keep)


if __name__ == "__main__":
    main()
