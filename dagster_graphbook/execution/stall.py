"""The stall watchdog: a batch step that makes no progress for a while says what it waits for.

A stuck ``load_fn``, ``on_item_batch`` or ``dump_fn`` (a stalled network mount, a deadlock) would
otherwise be silent until someone looks. The watchdog thread logs a warning naming the stage and
the items every ``stall_warning_s`` while nothing moves; it changes nothing else.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class StallWatchdog:
    """Call ``touch()`` on progress; ``describe()`` says what the step waits for.

    ``pause()``/``resume()`` bracket the spans where the step runs its own code: a step of a
    stream waiting for its turn is idle, not stalled.
    """

    def __init__(
        self,
        label: str,
        interval_s: float,
        describe: Callable[[], str],
        warn: Callable[[str], None],
        *,
        active: bool = True,
    ):
        self.label, self.interval_s, self.describe, self.warn = label, interval_s, describe, warn
        self.last = time.monotonic()
        self.active = active
        self.stopped = threading.Event()
        self.thread = threading.Thread(
            target=self._watch, name="graphbook-stall-watchdog", daemon=True
        )

    def __enter__(self) -> StallWatchdog:
        if self.interval_s > 0:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)

    def touch(self) -> None:
        self.last = time.monotonic()

    def resume(self) -> None:
        self.last, self.active = time.monotonic(), True

    def pause(self) -> None:
        self.active = False

    def _watch(self) -> None:
        reported = self.last
        while not self.stopped.wait(min(1.0, self.interval_s / 4)):
            now = time.monotonic()
            if (
                self.active
                and now - self.last >= self.interval_s
                and now - max(reported, self.last) >= self.interval_s
            ):
                reported = now
                try:
                    self.warn(
                        f"{self.label}: no progress for {now - self.last:.0f} s; {self.describe()}"
                    )
                except Exception:  # a watchdog must never break the step
                    pass
