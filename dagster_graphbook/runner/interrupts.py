"""A run started here is owned while it runs and stopped after an interrupt's grace."""

from __future__ import annotations

import logging
import uuid
from typing import Any, Mapping, Optional

import dagster as dg

from ..execution import InterruptBackstop, own_run
from .tags import RUN_TOKEN_TAG

_log = logging.getLogger("dagster_graphbook")


INTERRUPT_GRACE_S = 15.0  # after SIGINT/SIGTERM, a run still going this long is stopped


def backstop(instance: dg.DagsterInstance, run_tags: Mapping[str, str]) -> InterruptBackstop:
    return InterruptBackstop(instance, RUN_TOKEN_TAG, run_tags[RUN_TOKEN_TAG], INTERRUPT_GRACE_S)


def execute_in_process(
    job: dg.JobDefinition,
    instance: dg.DagsterInstance,
    config: Mapping[str, Any],
    partition_key: Optional[str],
    run_tags: Mapping[str, str],
) -> dg.ExecuteInProcessResult:
    """Run ``job`` here, holding its run-owner lock (``execute_in_process`` bypasses the job's
    executor, which takes it otherwise): killed, the run is found dead by the next one."""
    run_id = str(uuid.uuid4())
    with own_run(instance, run_id, _log.warning), backstop(instance, run_tags):
        return job.execute_in_process(
            run_config=config,
            instance=instance,
            partition_key=partition_key,
            raise_on_error=False,
            tags=run_tags,
            run_id=run_id,
        )
