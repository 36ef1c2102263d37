"""Loader and dump workers' priority, chosen from the measured cost of a batch.

With ``runtime.worker_nice`` left at -1 (its default), the step watches its first batches: when
it waited for the loader less than half the time, the model (``on_item_batch``) is what limits
the step, and the workers are lowered by ``AUTO_NICE`` so the model keeps a whole core while
they take what it leaves. A step that mostly waits for its loaders leaves them as they are: they
are the bottleneck, and other work on the machine should not slow them. The decision is taken
once: an unprivileged process cannot raise a priority it lowered.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

from .progress import Progress

AUTO = -1  # runtime.worker_nice: choose from the measured cost of a batch
AUTO_NICE = 10  # workers get ~10% of a core the model wants (CFS weights 110 vs 1024)
WARMUP_BATCHES = 8  # batches measured before deciding (after the first, which pays start-up)
MODEL_BOUND_WAIT_SHARE = 0.5


class AutoPriority:
    """Lowers the workers of ``pools`` (objects with ``lower(by)``) once, when the step is seen
    to be model-bound; does nothing when ``worker_nice`` was set."""

    def __init__(self, worker_nice: int, pools: Sequence[Any], say: Callable[[str], None]):
        self.pools = [p for p in pools if p is not None and hasattr(p, "lower")]
        self.say = say
        self.decided = worker_nice != AUTO or not self.pools
        self.since: Optional[tuple] = None  # (time, wait, batches) after the first batch

    def observe(self, progress: Progress) -> None:
        if self.decided:
            return
        batches, now = progress.counts["batches"], time.perf_counter()
        if self.since is None:
            self.since = (now, progress.loader_wait_s, batches)
            return
        t0, wait0, b0 = self.since
        if batches - b0 < WARMUP_BATCHES:
            return
        self.decided = True
        share = (progress.loader_wait_s - wait0) / max(now - t0, 1e-9)
        if share < MODEL_BOUND_WAIT_SHARE:
            for pool in self.pools:
                pool.lower(AUTO_NICE)
            self.say(
                f"loader and dump workers lowered by nice {AUTO_NICE}: over {batches - b0} "
                f"batches the step waited for them {share:.0%} of the time, so on_item_batch "
                "is the bottleneck and keeps its core (runtime.worker_nice sets this yourself)"
            )
