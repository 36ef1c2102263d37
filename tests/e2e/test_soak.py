"""Soak: 50 000 small items through source -> batch step (process loader and dump pools) -> sink,
as a real Dagster run. Nothing lost or duplicated (notes, items, dumps, sink lines), memory of
the step process flat while it runs, and no worker process, file descriptor or /dev/shm entry
left afterwards. Runs in CI under the ``soak`` marker; figures are printed (``-s``)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import dagster as dg
import psutil
import pytest

from tests.support.leaks import Leaks
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow

NOTES, ITEMS_PER_NOTE = 1000, 50  # 50 000 items


class RssSampler:
    """Samples the RSS of this (the step) process and of its workers every ``interval_s``."""

    def __init__(self, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.samples: list = []  # (wall time, step process RSS, summed worker RSS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            workers = 0
            for child in me.children(recursive=True):
                try:
                    workers += child.memory_info().rss
                except psutil.Error:
                    pass
            self.samples.append((time.time(), me.memory_info().rss, workers))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _step_window(dagster_home: str, run_id: str, step_key: str) -> tuple:
    instance = dg.DagsterInstance.from_config(dagster_home)
    times = {
        r.dagster_event.event_type: r.timestamp
        for r in instance.all_logs(run_id)
        if r.step_key == step_key and r.dagster_event is not None
    }
    return times[dg.DagsterEventType.STEP_START], times[dg.DagsterEventType.STEP_SUCCESS]


@pytest.mark.soak
@pytest.mark.xdist_group("heavy_or_timed")  # the heaviest load: never beside a timed test
def test_soak_50k_items_nothing_lost_memory_flat_nothing_left_behind(
    tmp_path, run_wf, dagster_home
):
    import dagster_graphbook.execution.pools.loader  # noqa: F401  (torch imported before the baseline)

    nodes = copy_nodes(tmp_path / "soak_nodes", "soak_nodes.py", "soak")
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    sink = tmp_path / "sink" / "notes.jsonl"
    wf = write_workflow(
        tmp_path,
        "soak",
        [
            step_node("1", "Items", {"notes": NOTES, "per_note": ITEMS_PER_NOTE}, source=True),
            step_node("2", "Work", {"dump_dir": str(dump_dir)}),
            step_node("3", "DumpJSONL"),
            resource_node("4", "Text", {"val": str(sink)}, label="SinkPath"),
        ],
        [edge("1", "out", "2"), edge("2", "out", "3"), edge("4", "resource", "3", "jsonl_path")],
    )
    params = {
        "Work.runtime.num_workers": 2,
        "Work.runtime.worker_type": "process",
        "Work.runtime.device": "cpu",
        "Work.runtime.dump_workers": 1,
        "Work.runtime.progress_interval_s": 2.0,
    }
    dg.DagsterInstance.from_config(dagster_home).dispose()
    leaks = Leaks()
    baseline = psutil.Process().memory_info().rss
    start = time.perf_counter()
    with RssSampler() as rss:
        run = run_wf(wf, custom_nodes=[nodes], params=params)
    seconds = time.perf_counter() - start
    assert run.success, run.failure
    total = NOTES * ITEMS_PER_NOTE

    # nothing lost or duplicated: notes at every step, items in on_item_batch, dumps, sink lines
    out = run.notes["Work"]["out"]
    assert [n["id"] for n in out] == list(range(NOTES))
    assert all(n["done"] == n["items"] for n in out)
    assert [n["id"] for n in run.notes["DumpJSONL"]["out"]] == list(range(NOTES))
    dumped = Counter()
    for f in dump_dir.iterdir():
        for line in f.read_text().splitlines():
            item, doubled = map(int, line.split())
            assert doubled == 2 * item
            dumped[item] += 1
    assert len(dumped) == total and set(dumped.values()) == {1}
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [n["id"] for n in lines] == list(range(NOTES)) and sum(
        len(n["done"]) for n in lines
    ) == total

    # memory flat while the batch step ran: the second half's peak is not above the first half's
    t0, t1 = _step_window(dagster_home, run.run_id, "soak__Work")
    inside = [s for s in rss.samples if t0 <= s[0] <= t1]
    assert len(inside) >= 20, (
        f"too few RSS samples ({len(inside)}) in the batch step's {t1 - t0:.1f} s"
    )
    warm = inside[len(inside) // 10 :]  # after start-up (workers forked, blocks mapped)
    half = len(warm) // 2
    first, second = max(s[1] for s in warm[:half]), max(s[1] for s in warm[half:])
    mib = 1024 * 1024
    print(
        f"\nsoak: {total} items, {NOTES} notes in {seconds:.1f} s (batch step "
        f"{t1 - t0:.1f} s, {total / (t1 - t0):.0f} items/s); "
        f"step process RSS {baseline / mib:.0f} MiB before the run, peak "
        f"{max(s[1] for s in inside) / mib:.0f} MiB (first half {first / mib:.0f}, "
        f"second half {second / mib:.0f}), "
        f"workers' RSS peak {max(s[2] for s in inside) / mib:.0f} MiB"
    )
    assert second <= first + 32 * mib, (
        f"step process memory grew from {first / mib:.0f} to {second / mib:.0f} MiB "
        "during the batch step"
    )

    leaks.check()
