"""Schedules and sensors for workflows (nightly runs of daily partitions)."""

from __future__ import annotations

from typing import Any, List, Tuple

import dagster as dg


def schedules_and_sensors(spec: Any, defs: Any) -> Tuple[List[Any], List[Any]]:
    """The schedule (and sensor) a workflow declares."""
    schedules: List[Any] = []
    sensors: List[Any] = []
    name = defs.workflow.name
    if spec.partitions_def is not None and spec.cron_schedule is None:
        if isinstance(spec.partitions_def, dg.TimeWindowPartitionsDefinition):
            schedules.append(dg.build_schedule_from_partitioned_job(defs.job, name=f"{name}_nightly", hour_of_day=spec.schedule_hour or 0))
    elif spec.cron_schedule is not None:
        if spec.partitions_def is not None:
            schedules.append(dg.build_schedule_from_partitioned_job(defs.job, name=f"{name}_schedule", cron_schedule=spec.cron_schedule))
        else:
            schedules.append(dg.ScheduleDefinition(name=f"{name}_schedule", job=defs.job, cron_schedule=spec.cron_schedule))
    if spec.sensor is not None:
        sensors.append(spec.sensor.build(defs))
    return schedules, sensors
