"""Progress lines for long steps: items done, items/s and queue depths, every few seconds."""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional


class Progress:
    """Counts what a batch step did and reports it at a steady interval."""

    def __init__(self, label: str, total_items: int, total_notes: int, device: str, emit: Callable[[str], None], interval_s: float = 5.0):
        self.label, self.device, self.emit, self.interval_s = label, device, emit, interval_s
        self.total_items, self.total_notes = total_items, total_notes
        self.counts: Dict[str, int] = {"loaded": 0, "processed": 0, "failed": 0, "dumps_submitted": 0, "dumps_done": 0, "notes_released": 0, "batches": 0}
        self.start = time.perf_counter()
        self.last = self.start
        self.loader_wait_s = 0.0
        self.on_item_batch_s = 0.0

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def items_per_s(self) -> float:
        return self.counts["processed"] / max(self.elapsed(), 1e-9)

    def line(self, loader_in_flight: Optional[int], dumps_in_flight: int) -> str:
        c = self.counts
        loader = "?" if loader_in_flight is None else str(loader_in_flight)
        return (
            f"{self.label}: {c['processed']}/{self.total_items} items processed "
            f"({c['loaded']} loaded, {c['failed']} failed), {c['dumps_done']}/{c['dumps_submitted']} dumps done, "
            f"{c['notes_released']}/{self.total_notes} notes released, {self.items_per_s():.1f} items/s, "
            f"queues: loader {loader} batches, dumps {dumps_in_flight} in flight, device {self.device}"
        )

    def maybe_report(self, loader_in_flight: Optional[int], dumps_in_flight: int) -> None:
        now = time.perf_counter()
        if now - self.last >= self.interval_s:
            self.last = now
            self.emit(self.line(loader_in_flight, dumps_in_flight))

    def stats(self) -> Dict[str, float]:
        elapsed = self.elapsed()
        return {
            "items": self.counts["processed"],
            "items_failed": self.counts["failed"],
            "batches": self.counts["batches"],
            "dumps": self.counts["dumps_done"],
            "notes": self.counts["notes_released"],
            "seconds": round(elapsed, 4),
            "items_per_s": round(self.counts["processed"] / max(elapsed, 1e-9), 2),
            "loader_wait_s": round(self.loader_wait_s, 4),
            "on_item_batch_s": round(self.on_item_batch_s, 4),
        }
