"""Progress lines for long steps: items done, percent, items/s, ETA and queue depths.

The first line comes after about a second, then one every ``interval_s``. Lines are short and
start with ``done/total (pct%)`` (``PROGRESS_LINE``): the op name beside them in the event log
already says which step, and the CLI rewrites such a line in place on a terminal.
"""

from __future__ import annotations

import re
import time
from typing import Callable, Dict, Optional

from ...errors import Label

FIRST_REPORT_S = 1.0
PROGRESS_LINE = re.compile(r"^\d+/\d+ \(\d+%\) · ")


class Progress:
    """Counts what a batch step did and reports it at a steady interval."""

    def __init__(
        self,
        label: Label,
        total_items: int,
        total_notes: int,
        device: str,
        emit: Callable[[str], None],
        interval_s: float,  # runtime.progress_interval_s (its one default is the settings class's)
    ):
        self.label, self.device, self.emit, self.interval_s = label, device, emit, interval_s
        self.total_items, self.total_notes = total_items, total_notes
        self.counts: Dict[str, int] = {
            "loaded": 0,
            "processed": 0,
            "failed": 0,
            "dumps_submitted": 0,
            "dumps_done": 0,
            "notes_released": 0,
            "batches": 0,
        }
        self.start = time.perf_counter()
        self.next_report = self.start + min(FIRST_REPORT_S, interval_s)
        self.loader_wait_s = 0.0
        self.on_item_batch_s = 0.0
        self.decode_s = 0.0  # decoding what encoded_image left encoded (in the main process)
        self.images_decoded = 0

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def items_per_s(self) -> float:
        return self.counts["processed"] / max(self.elapsed(), 1e-9)

    def line(self, loader_in_flight: Optional[int], dumps_in_flight: int) -> str:
        """``1152/3000 (38%) · 52.6 items/s · ETA 35 s · 0 failed · queues: ...``."""
        c = self.counts
        done = c["processed"] + c["failed"]
        pct = 100 * done // self.total_items if self.total_items else 100
        rate = self.items_per_s()
        left = self.total_items - done
        eta = f"ETA {left / rate:.0f} s" if rate > 0 else "ETA ?"
        loader = "?" if loader_in_flight is None else str(loader_in_flight)
        return (
            f"{done}/{self.total_items} ({pct}%) · {rate:.1f} items/s · {eta} · "
            f"{c['failed']} failed"
            f" · queues: loader {loader} batches, dumps {dumps_in_flight} · "
            f"{c['notes_released']}/{self.total_notes} notes out · {self.device}"
        )

    def maybe_report(self, loader_in_flight: Optional[int], dumps_in_flight: int) -> None:
        """A line if one is due; none once every item is done (the step's final line says it)."""
        if self.counts["processed"] + self.counts["failed"] >= self.total_items:
            return
        now = time.perf_counter()
        if now >= self.next_report:
            self.next_report = now + self.interval_s
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
            **(
                {"images_decoded": self.images_decoded, "decode_s": round(self.decode_s, 4)}
                if self.images_decoded
                else {}
            ),
        }
