"""Dagster's private modules, in one place: each name here is used because Dagster's public API
has no equivalent, and a Dagster upgrade that moves one breaks this module only.

- config evaluation errors and types: ``params`` turns Dagster's config errors into one line per
  ``STEP.PARAM`` with what the workflow expects;
- the run-tag names of re-execution and the log record's event attribute: the runner resumes
  runs and keeps failure events out of its console logger;
- the captured-interrupt check: the dead-run watcher lets a terminate through;
- the plan orchestration types and helpers: the Dask executor submits Dagster's own steps, and
  a from-failure run's plan gets the shards Dagster left out (``defs/reexecution``);
- the step handler types and step events: the Ray executor checks that a step's Ray job can be
  placed before and while it waits (``integrations/ray``);
- the deep merge of dicts: the runner sets ``--set`` params over the caller's run config as
  Dagster merges config layers;
- the wait between claims of a pool's slot: ``sleep_between_slot_claims`` fixes Dagster's.
"""

from __future__ import annotations

import time

from dagster._config.config_type import ConfigScalar, ConfigScalarKind, ConfigTypeKind
from dagster._config.errors import (
    FieldNotDefinedErrorData,
    FieldsNotDefinedErrorData,
    MissingFieldErrorData,
    MissingFieldsErrorData,
    RuntimeMismatchErrorData,
)
from dagster._config.stack import EvaluationStackListItemEntry, EvaluationStackPathEntry
from dagster._core.errors import raise_execution_interrupts
from dagster._core.execution.api import create_execution_plan
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.objects import StepFailureData
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.executor.step_delegating import (
    CheckStepHealthResult,
    StepHandler,
    StepHandlerContext,
)
from dagster._core.log_manager import LOG_RECORD_EVENT_ATTR
from dagster._core.storage.tags import (
    PARENT_RUN_ID_TAG,
    RESUME_RETRY_TAG,
    ROOT_RUN_ID_TAG,
    TAGS_TO_MAYBE_OMIT_ON_RETRY,
)
from dagster._utils import iterate_with_context
from dagster._utils.error import SerializableErrorInfo
from dagster._utils.interrupts import check_captured_interrupt
from dagster._utils.merger import deep_merge_dicts

__all__ = [
    "CheckStepHealthResult",
    "SerializableErrorInfo",
    "StepFailureData",
    "StepHandler",
    "StepHandlerContext",
    "LOG_RECORD_EVENT_ATTR",
    "PARENT_RUN_ID_TAG",
    "RESUME_RETRY_TAG",
    "ROOT_RUN_ID_TAG",
    "TAGS_TO_MAYBE_OMIT_ON_RETRY",
    "ConfigScalar",
    "ConfigScalarKind",
    "ConfigTypeKind",
    "EvaluationStackListItemEntry",
    "EvaluationStackPathEntry",
    "ExecutionPlan",
    "FieldNotDefinedErrorData",
    "FieldsNotDefinedErrorData",
    "MissingFieldErrorData",
    "MissingFieldsErrorData",
    "PlanOrchestrationContext",
    "RuntimeMismatchErrorData",
    "check_captured_interrupt",
    "create_execution_plan",
    "deep_merge_dicts",
    "iterate_with_context",
    "raise_execution_interrupts",
    "sleep_between_slot_claims",
]


def _until_next_claim(self: InstanceConcurrencyContext) -> float:
    """Seconds until a pending claim of a pool's slot is tried again (0: one is due now)."""
    now = time.time()
    timeouts = self._pending_timeouts.values() if self._pending_claims else ()
    return max(0.0, min(timeouts, default=now) - now)


def sleep_between_slot_claims() -> None:
    """Make a run waiting for a pool's slot sleep until its next claim.

    Dagster 1.13's ``interval_to_next_pending_claim_check`` returns ``min(0, ...)``, never more
    than 0, so its in-process executor never slept while a step waited for a slot (a ``gpu``
    pool limited to 1, held by another run): the waiting run spun a core, taking it from the
    run that held the slot (dagster-io/dagster#20367, closed unmerged). This is the time to
    the earliest retry Dagster itself set (its back-off, 1 s growing to 15 s), so claims are
    tried exactly when they were before."""
    InstanceConcurrencyContext.interval_to_next_pending_claim_check = _until_next_claim  # type: ignore[method-assign]
