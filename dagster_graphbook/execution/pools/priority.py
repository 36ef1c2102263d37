"""Loader and dump workers' priority, chosen from the measured cost of a batch.

With ``runtime.worker_nice`` left at -1 (its default), the step watches its first batches: when
more than half its time went into ``on_item_batch``, the model is what limits the step, and the
workers are lowered by ``AUTO_NICE`` so the model keeps a whole core while they take what it
leaves. A step that mostly waits (for its loaders, or for its dumps to drain) leaves them as they
are: they are the bottleneck, and other work on the machine should not slow them. The decision is
taken once: an unprivileged process cannot raise a priority it lowered.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

AUTO = -1  # runtime.worker_nice: choose from the measured cost of a batch
AUTO_NICE = 10  # workers get ~10% of a core the model wants (CFS weights 110 vs 1024)
WARMUP_BATCHES = 8  # batches measured before deciding (after the first, which pays start-up)
MODEL_BOUND_SHARE = 0.5  # of the step's time in on_item_batch


class AutoPriority:
    """Lowers the workers of ``pools`` (objects with ``lower(by)``) once, when the step is seen
    to be model-bound; does nothing when ``worker_nice`` was set. One per step: a stream's
    chunks add up to its first batches."""

    def __init__(self, worker_nice: int, pools: Sequence[Any], say: Callable[[str], None]):
        self.pools = [p for p in pools if p is not None and hasattr(p, "lower")]
        self.say = say
        self.decided = worker_nice != AUTO
        self.lowered = 0  # nice levels the workers were lowered by
        self.batches = -1  # the step's first batch pays the pools' start-up: not counted
        self.computed = self.spent = 0.0

    def adopt(self, pools: Sequence[Any]) -> None:
        """The pools of the step's next run (a stream's next chunk): new ones get the decision."""
        new = [p for p in pools if p is not None and hasattr(p, "lower")]
        for pool in new:
            if self.lowered and not any(pool is old for old in self.pools):
                pool.lower(self.lowered)
        self.pools = new

    def observe(self, computed_s: float, spent_s: float) -> None:
        """One batch: ``computed_s`` in ``on_item_batch`` out of ``spent_s`` in all."""
        if self.decided:
            return
        self.batches += 1
        if self.batches < 1:
            return
        self.computed += computed_s
        self.spent += spent_s
        if self.batches < WARMUP_BATCHES:
            return
        self.decided = True
        share = self.computed / max(self.spent, 1e-9)
        if share > MODEL_BOUND_SHARE and self.pools:
            self.lowered = AUTO_NICE
            for pool in self.pools:
                pool.lower(AUTO_NICE)
            self.say(
                f"loader and dump workers lowered by nice {AUTO_NICE}: over {self.batches} "
                f"batches on_item_batch took {share:.0%} of the step's time, so it is the "
                "bottleneck and keeps its core (runtime.worker_nice sets this yourself)"
            )
