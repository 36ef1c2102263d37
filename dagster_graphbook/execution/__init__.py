"""Running steps: a step op's body, each step's lifecycle, the batch path and its worker pools.

It reads the compiled plan (``plan/``) and the notes store (``store/``), never ``defs/``. Its rooms,
each importing only the ones below it::

    op/           the op body: config -> steps -> drivers -> Outputs; shards, metadata, checks
    step/         one step's lifecycle (StepDriver) and the stream scheduler that feeds it
    batch/        a batch step run: batches through load_fn, on_item_batch, dump_fn; decoding
    pools/        the loader and dump worker pools a batch run uses
    incremental/  note keys and the reuse of stored outputs
    ownership/    who owns a run: dead runs, GPU leases, run-time refusals, signals

and under all of them the step errors (``errors``), the notes leaving a step by its pins
(``routing``), the stall watchdog (``stall``) and the device (``device``).

What the rest of the package uses is named here: ``defs/`` builds ops around the op body and
its shard, check and key helpers; ``runner/``, ``integrations/`` and ``defs/executor`` own runs;
the CLI reads progress lines and stuck threads.
"""

from .batch.progress import PROGRESS_LINE
from .errors import StepFailure
from .incremental.keys import (
    code_folders,
    declared_defaults,
    named_paths,
    record_resource,
    resource_version,
    stamps,
    version_of,
)
from .incremental.reuse import REFRESH_TAG
from .op.advice import warn_heavy_outputs
from .op.checks import with_checks
from .op.shards import SHARD_CRASH_RETRY, commit_needs_step, commit_shards, plan_shards, run_shard
from .op.step_op import config_kwargs, execute_op, log_emitter, refuse_unfilled
from .ownership.dead_runs import InterruptBackstop, join_run, own_run, sweep_dead_runs
from .ownership.guard import check_partition_key
from .pools.threads import stuck_threads

__all__ = [
    "PROGRESS_LINE",
    "REFRESH_TAG",
    "SHARD_CRASH_RETRY",
    "InterruptBackstop",
    "StepFailure",
    "check_partition_key",
    "code_folders",
    "commit_needs_step",
    "commit_shards",
    "config_kwargs",
    "declared_defaults",
    "execute_op",
    "join_run",
    "log_emitter",
    "named_paths",
    "own_run",
    "plan_shards",
    "record_resource",
    "refuse_unfilled",
    "resource_version",
    "run_shard",
    "stamps",
    "stuck_threads",
    "sweep_dead_runs",
    "version_of",
    "warn_heavy_outputs",
    "with_checks",
]
