"""Schedules and sensors for workflows: nightly runs of daily partitions, runs (or recorded
arrivals) for new dated folders."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

import dagster as dg

from .automation import automation_on, automation_sensor

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def daily_partitions(
    start_date: str, *, end_offset: int = 0, timezone: Optional[str] = None
) -> dg.DailyPartitionsDefinition:
    """Daily partitions keyed ``YYYY-MM-DD``; the last one is yesterday (``end_offset=0``), a
    complete day."""
    return dg.DailyPartitionsDefinition(
        start_date=start_date, end_offset=end_offset, timezone=timezone
    )


def schedules_and_sensors(
    spec: Any, defs: Any, translator: Any = None
) -> Tuple[List[Any], List[Any]]:
    """The schedule (and sensor) a workflow declares, named by the translator.

    Daily partitions without a cron: a nightly schedule at ``schedule_hour`` (UTC, default 0) that
    runs the previous day. Partitions with a cron: each tick runs the latest complete partition.
    A cron alone: an unpartitioned schedule.
    """
    from ..plan.translator import GraphbookTranslator

    translator = translator or GraphbookTranslator()
    schedules: List[Any] = []
    sensors: List[Any] = []

    def schedule_name(kind: str) -> str:
        return translator.get_schedule_name(defs.workflow, kind)

    def sensor_name(kind: str) -> str:
        return translator.get_sensor_name(defs.workflow, kind)

    if automation_on(spec.automation):  # the condition runs the days, not a schedule
        return [], _automation_sensors(spec, defs, sensor_name)
    if spec.partitions_def is not None and spec.cron_schedule is None:
        if isinstance(spec.partitions_def, dg.TimeWindowPartitionsDefinition):
            schedules.append(
                dg.build_schedule_from_partitioned_job(
                    defs.job, name=schedule_name("nightly"), hour_of_day=spec.schedule_hour or 0
                )
            )
    elif spec.cron_schedule is not None:
        if spec.partitions_def is not None:
            schedules.append(
                latest_partition_schedule(
                    defs.job,
                    spec.partitions_def,
                    spec.cron_schedule,
                    name=schedule_name("schedule"),
                )
            )
        else:
            schedules.append(
                dg.ScheduleDefinition(
                    name=schedule_name("schedule"), job=defs.job, cron_schedule=spec.cron_schedule
                )
            )
    if spec.sensor is not None:
        kind = "new_files" if spec.sensor.watch == "files" else "new_folder"
        sensors.append(spec.sensor.build(defs.job, spec.partitions_def, name=sensor_name(kind)))
    return schedules, sensors


def _automation_sensors(spec: Any, defs: Any, sensor_name: Any) -> List[Any]:
    """With an automation condition: its sensor, and the folder sensor recording new days only
    (the condition, not the folder sensor, requests the runs; a schedule would run days twice)."""
    sensors: List[Any] = [
        automation_sensor(
            defs.job.name,
            defs.asset_keys,
            name=sensor_name("automation"),
            run_tags=dict(spec.job_tags or {}),
        )
    ]
    if spec.sensor is not None:
        sensors.append(
            spec.sensor.build(
                defs.job, spec.partitions_def, request_runs=False, name=sensor_name("new_folder")
            )
        )
    return sensors


def latest_partition_schedule(
    job: Any,
    partitions_def: dg.PartitionsDefinition,
    cron_schedule: str,
    *,
    name: str,
    timezone: str = "UTC",
) -> dg.ScheduleDefinition:
    """A cron schedule whose ticks run the latest partition that exists at tick time
    (Dagster's ``build_schedule_from_partitioned_job`` takes no cron for time partitions)."""

    def latest(context: dg.ScheduleEvaluationContext) -> Any:
        with dg.partition_loading_context(effective_dt=context.scheduled_execution_time):
            key = partitions_def.get_last_partition_key()
        if key is None:
            return dg.SkipReason("no partition exists yet")
        return dg.RunRequest(run_key=key, partition_key=key)

    return dg.ScheduleDefinition(
        name=name,
        job=job,
        cron_schedule=cron_schedule,
        execution_fn=latest,
        execution_timezone=timezone,
        description=f"Runs the latest partition of {job.name} on '{cron_schedule}' ({timezone})",
    )


def day_folders(folder: Union[str, Path]) -> Tuple[List[str], List[str]]:
    """``(days, problems)``: the ``YYYY-MM-DD`` folders of ``folder``, oldest first, and why others
    that look like days were left out (an impossible date, a link that leads outside ``folder``).

    Hidden folders (a day still being written under a temporary name) are not listed.
    """
    days, problems = [], []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return [], []
    root = os.path.realpath(folder)
    for e in entries:
        if not _DAY.match(e.name) or not e.is_dir():
            continue
        try:
            dt.date.fromisoformat(e.name)
        except ValueError:
            problems.append(f"{e.name}: not a date")
            continue
        if e.is_symlink() and os.path.dirname(os.path.realpath(e.path)) != root:
            problems.append(f"{e.name}: a link to {os.path.realpath(e.path)}, outside {root}")
            continue
        days.append(e.name)
    return sorted(days), sorted(problems)


def done_days(cursor: Optional[str]) -> set:
    """The days a sensor cursor says were requested (a JSON list). A cursor of an older version
    (one day: the latest requested) stands for every day up to it."""
    if not cursor:
        return set()
    if cursor.startswith("["):
        return set(json.loads(cursor))
    return _UpTo(cursor)


class _UpTo(set):
    """An old-style cursor: every day up to and including ``last`` counts as done."""

    def __init__(self, last: str):
        super().__init__()
        self.last = last

    def __contains__(self, day: object) -> bool:
        return (isinstance(day, str) and day <= self.last) or set.__contains__(self, day)


def _sensor_description(job_name: str, folder: Path, recorded: Optional[dg.AssetKey]) -> str:
    """A folder sensor's description: it runs the job, or only records new days as ``recorded``."""
    if recorded is None:
        return f"Runs {job_name} for each new dated folder (YYYY-MM-DD) in {folder}"
    return (
        f"Records each new dated folder (YYYY-MM-DD) in {folder} as "
        f"{recorded.to_user_string()} (the automation condition of {job_name} runs it)"
    )


def user_asset_key(value: Union[str, Sequence[str], dg.AssetKey]) -> dg.AssetKey:
    """An asset key as a user writes one: ``"a/b"`` (as the UI and YAML show it), a list of
    parts, or an ``AssetKey``."""
    if isinstance(value, str):
        return dg.AssetKey.from_user_string(value)
    return dg.AssetKey.from_coercible(value)


@dataclass
class FolderSensor:
    """Starts a run of a workflow when a new dated folder (``YYYY-MM-DD``) appears in ``folder``.

    The cursor is the latest day already requested, so each day starts one run (the run key is
    the day too). With daily partitions the run processes that day's partition; a folder for a
    day whose partition does not exist yet (today, before midnight) waits until it does.
    Like Dagster's sensors, it is stopped until turned on in the UI (or ``default_status``).
    With ``asset_key`` (the workflow's external input, e.g. ``nightly_shapes/incoming``) each new
    day is also recorded as a materialization of that asset (of the day's partition when the
    workflow is partitioned; its folder and file count as metadata), so the UI shows when data
    arrived and automation conditions see it.
    """

    folder: Union[str, Path]
    asset_key: Optional[Union[str, Sequence[str], dg.AssetKey]] = None
    name: Optional[str] = None
    minimum_interval_seconds: int = 30
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED
    # "days": a run per new dated folder; "files": an unpartitioned workflow over a folder (or
    # bucket prefix) that grows: a run when its files changed, which an incremental workflow
    # spends on the new files only (docs/incremental.md)
    watch: Literal["days", "files"] = "days"

    def build(
        self,
        job: Any,
        partitions_def: Optional[dg.PartitionsDefinition] = None,
        *,
        request_runs: bool = True,
        name: Optional[str] = None,
    ) -> dg.SensorDefinition:
        """The sensor; ``request_runs=False`` only records the asset (an automation condition on
        the workflow's assets requests the runs)."""
        if self.watch == "files":
            return self._files_sensor(job, partitions_def, name)
        folder = Path(self.folder)
        if not request_runs and self.asset_key is None:
            raise ValueError(
                f"{job.name}: with automation the folder sensor only records new days as its "
                "asset; give it one (sensor_asset / FolderSensor(asset_key=...))"
            )
        asset_key = None if self.asset_key is None else user_asset_key(self.asset_key)

        def evaluate(context: dg.SensorEvaluationContext) -> dg.SensorResult:
            requests: List[dg.RunRequest] = []
            arrived: List[dg.AssetMaterialization] = []
            done = done_days(context.cursor)
            days, problems = day_folders(folder)
            for problem in problems:
                context.log.warning(f"{self.name or job.name}: skipping {folder}/{problem}")
            for day in (d for d in days if d not in done):
                partition_key = None
                if partitions_def is not None:
                    if not partitions_def.has_partition_key(day):
                        if day >= (partitions_def.get_first_partition_key() or ""):
                            continue  # no partition yet (today): ask again on a later tick
                        context.log.info(f"skipping {folder / day}: before the first partition")
                        done.add(day)
                        continue
                    partition_key = day
                if request_runs:
                    requests.append(
                        dg.RunRequest(
                            run_key=day,
                            partition_key=partition_key,
                            tags={"dagster_graphbook/folder": str(folder / day)},
                        )
                    )
                if asset_key is not None:
                    files = [e for e in os.scandir(folder / day) if e.is_file()]
                    arrived.append(
                        dg.AssetMaterialization(
                            asset_key,
                            partition=partition_key,
                            description=f"new folder {folder / day}",
                            metadata={
                                "day": day,
                                "path": dg.MetadataValue.path(str(folder / day)),
                                "files": len(files),
                                "bytes": sum(e.stat().st_size for e in files),
                            },
                        )
                    )
                done.add(day)
            done_here = sorted(d for d in days if d in done)
            cursor = json.dumps(done_here, separators=(",", ":")) if done_here else context.cursor
            skip = (
                None
                if requests or arrived
                else f"no new dated folder in {folder}"
                + (f" after {context.cursor}" if context.cursor else "")
            )
            return dg.SensorResult(
                run_requests=requests or None,
                cursor=cursor,
                skip_reason=skip,
                asset_events=arrived or None,
            )

        return dg.SensorDefinition(
            name=self.name or name or f"{job.name}_new_folder",
            evaluation_fn=evaluate,
            job=job,
            minimum_interval_seconds=self.minimum_interval_seconds,
            default_status=self.default_status,
            description=_sensor_description(job.name, folder, None if request_runs else asset_key),
        )

    def _files_sensor(
        self, job: Any, partitions_def: Optional[dg.PartitionsDefinition], name: Optional[str]
    ) -> dg.SensorDefinition:
        """A run each time the files under ``folder`` changed (new, replaced or removed): the
        cursor holds a digest of their listing and a count of the changes, the run key both."""
        if partitions_def is not None or self.asset_key is not None:
            raise ValueError(
                f"{job.name}: the folder sensor's watch='files' is for an unpartitioned workflow "
                "over a folder that grows, and records no asset; a partitioned one watches "
                "dated folders (watch='days'), which an asset_key records"
            )
        folder = str(self.folder)

        def evaluate(context: dg.SensorEvaluationContext) -> dg.SensorResult:
            files = listed_files(folder)
            digest = hashlib.sha256(json.dumps(files).encode()).hexdigest()[:32]
            seen: Dict[str, Any] = json.loads(context.cursor or '{"digest": "", "n": 0}')
            if digest == seen["digest"]:
                return dg.SensorResult(
                    skip_reason=f"no file changed in {folder}", cursor=context.cursor
                )
            n = seen["n"] + 1  # in the run key: a folder back to an earlier state runs again
            request = dg.RunRequest(
                run_key=f"files-{n}-{digest[:16]}",
                tags={
                    "dagster_graphbook/folder": folder,
                    "dagster_graphbook/files": str(len(files)),
                },
            )
            return dg.SensorResult(
                run_requests=[request], cursor=json.dumps({"digest": digest, "n": n})
            )

        return dg.SensorDefinition(
            name=self.name or name or f"{job.name}_new_files",
            evaluation_fn=evaluate,
            job=job,
            minimum_interval_seconds=self.minimum_interval_seconds,
            default_status=self.default_status,
            description=f"Runs {job.name} when the files under {folder} change (new, replaced "
            "or removed); an incremental workflow computes only those (docs/incremental.md)",
        )


def listed_files(folder: str) -> List[Tuple[str, int, str]]:
    """Every file under ``folder`` (a local folder or a bucket prefix, listed fresh): its path,
    size and time (a bucket object's ETag when it has one), sorted."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(folder)
    fs.invalidate_cache()
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return []
    return sorted(  # a local file's ctime ("created") too: a copy keeping the mtime is a change
        (
            path,
            int(info.get("size") or 0),
            f"{info.get('ETag') or info.get('mtime') or ''}:{info.get('created') or ''}",
        )
        for path, info in found.items()
        if info.get("type", "file") == "file" and not os.path.basename(path).startswith(".")
    )
