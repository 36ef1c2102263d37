"""What runs started here print: warnings, not the failure the caller says once."""

from __future__ import annotations

import logging
from typing import Any, Dict

import dagster as dg

from ..dagster_internals import (
    LOG_RECORD_EVENT_ATTR,
)
from .failure import RETURNED_EVENTS


def console_loggers(level: str) -> Dict[str, Any]:
    """The run config ``loggers`` section that sets the console logger's level: ``WARNING`` for
    a run whose caller says the failure itself (``quiet``), ``CRITICAL`` while the CLI's live
    display shows the run's messages."""
    return {"console": {"config": {"log_level": level}}}


def _not_returned(record: logging.LogRecord) -> bool:
    event = getattr(record, LOG_RECORD_EVENT_ATTR, None)
    return getattr(event, "event_type", None) not in RETURNED_EVENTS


@dg.logger(
    dg.colored_console_logger.config_schema,
    description="Dagster's colored console logger, less the failures a WorkflowRun returns",
)
def failures_unsaid_console_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    """The console logger of runs started here: the caller says the run's failure once, from
    ``WorkflowRun.failure`` (Dagster's logger printed each with its stack trace, twice)."""
    logger = dg.colored_console_logger.logger_fn(init_context)
    logger.addFilter(_not_returned)
    return logger


def failures_unsaid(job: dg.JobDefinition) -> dg.JobDefinition:
    """``job`` with `failures_unsaid_console_logger` where it has Dagster's default loggers."""
    if dict(job.loggers) == {"console": dg.colored_console_logger}:
        return job.with_logger_defs({"console": failures_unsaid_console_logger})
    return job
