"""Declarative automation for a workflow: an automation condition on its assets, chosen beside
(instead of) the schedule and the folder sensor's run requests, and the sensor that evaluates it.

``eager``: the latest day runs once its inputs are there (the folder sensor records the external
``incoming`` day, then the condition requests the workflow's assets for that day).
``on_cron``: the latest day runs after the workflow's cron tick (``cron_schedule``, else
``schedule_hour``, else midnight UTC), once its inputs are present.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import dagster as dg

from ..model.workflow import WorkflowError
from ..plan.options import Automation

AUTOMATIONS = ("eager", "on_cron", "none")


def automation_on(automation: Automation) -> bool:
    """Whether ``automation`` asks for a condition (not None or "none")."""
    return automation is not None and not (isinstance(automation, str) and automation == "none")


def automation_condition(
    automation: Automation,
    *,
    cron_schedule: Optional[str] = None,
    schedule_hour: Optional[int] = None,
    where: str = "workflow",
    source: str = "<workflow>",
) -> Optional[dg.AutomationCondition]:
    """The condition ``automation`` stands for (None: no automation, runs come from the schedule
    and the sensor). ``eager`` or a condition replaces the schedule: giving one is an error
    (``WorkflowError`` naming the workflow file ``source``)."""
    if not automation_on(automation):
        return None
    condition = isinstance(automation, dg.AutomationCondition)
    if (condition or automation == "eager") and (cron_schedule or schedule_hour is not None):
        what = "an AutomationCondition" if condition else "'eager' (each new day when it arrives)"
        raise WorkflowError(
            source,
            [
                f"{where}: automation {what} replaces the schedule: drop "
                "schedule_hour/cron_schedule, or use automation 'on_cron' to run on that schedule"
            ],
        )
    if condition:
        return automation  # type: ignore[return-value]
    if automation == "eager":
        return dg.AutomationCondition.eager()
    if automation == "on_cron":
        return on_cron_when_present(cron_schedule or f"0 {schedule_hour or 0} * * *")
    raise WorkflowError(
        source,
        [
            f"{where}: automation must be one of {', '.join(AUTOMATIONS)} or a "
            f"dagster AutomationCondition, got {automation!r}"
        ],
    )


def on_cron_when_present(cron: str, timezone: str = "UTC") -> dg.AutomationCondition:
    """After each tick of ``cron``, the latest day once its inputs are present (at once if they
    arrived before the tick). Dagster's ``on_cron`` waits for inputs updated *after* the tick, so a
    day the folder sensor recorded at 00:01 would never run on a 02:00 cron."""
    ac = dg.AutomationCondition
    # an asset's or a check's (as Dagster's on_cron): mypy cannot solve cron_tick_passed's type
    tick: dg.AutomationCondition[Union[dg.AssetKey, dg.AssetCheckKey]]
    tick = ac.cron_tick_passed(cron, timezone)
    return (
        ac.in_latest_time_window()
        & tick.since_last_handled()
        & ~ac.any_deps_missing()
        & ~ac.any_deps_in_progress()
        & ~ac.in_progress()
    ).with_label(f"on_cron({cron}, {timezone}) once inputs are present")


def with_automation(
    assets: Sequence[dg.AssetsDefinition], condition: dg.AutomationCondition
) -> list:
    """The workflow's assets, each with ``condition``."""
    return [
        asset.map_asset_specs(lambda spec: spec.replace_attributes(automation_condition=condition))
        for asset in assets
    ]


def automation_sensor(
    job_name: str, keys: Sequence[dg.AssetKey], name: Optional[str] = None, **kwargs: Any
) -> dg.AutomationConditionSensorDefinition:
    """``<job>_automation``: evaluates the workflow's conditions (running by default, like
    Dagster's default automation sensor). Requests go out as one run per day, not as backfills:
    a run of the workflow stores notes for one partition. Pass the job's tags as ``run_tags``:
    its runs are of Dagster's asset job, not of the workflow's job."""
    return dg.AutomationConditionSensorDefinition(
        name or f"{job_name}_automation",
        target=dg.AssetSelection.assets(*keys),
        default_status=kwargs.pop("default_status", dg.DefaultSensorStatus.RUNNING),
        emit_backfills=False,
        description=f"Runs the assets of {job_name} when their automation condition is true",
        **kwargs,
    )
