"""`GraphbookWorkflowComponent`: a Graphbook workflow file declared in YAML (a Dagster component).

```yaml
# definitions/nightly_shapes/defs.yaml
type: dagster_graphbook.GraphbookWorkflowComponent
attributes:
  workflow: ../../workflows/nightly_shapes.json      # paths are relative to this file's folder
  custom_nodes: [../../custom_nodes/nightly]
  partitions: {start_date: "2025-01-01"}             # daily partitions
  schedule_hour: 2                                   # nightly at 02:00 UTC: the previous day
  sensor_folder: ../../data/incoming                 # a run per new dated folder
  sensor_asset: nightly_shapes/incoming              # ...recorded as a materialization of this external asset
  external_deps: {IncomingImages: [nightly_shapes/incoming]}
  op_tags: {team: vision}
```

Like dagster-dbt's ``DbtProjectComponent``: the component points at an external file and builds
the same definitions as ``build_definitions([GraphbookWorkflow(...)])`` in Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Literal, Optional

import dagster as dg

from .definitions import GraphbookWorkflow, build_definitions
from .schedules import FolderSensor, daily_partitions


class DailyPartitions(dg.Model, dg.Resolvable):
    """Daily partitions keyed ``YYYY-MM-DD`` (the last is the previous, complete day)."""

    start_date: str
    end_offset: int = 0
    timezone: Optional[str] = None


class GraphbookWorkflowComponent(dg.Component, dg.Model, dg.Resolvable):
    """A Graphbook workflow file (editor JSON, or a ``.py`` defining a ``Graph``) as a Dagster job,
    its steps' assets, and optionally daily partitions, a schedule and a folder sensor."""

    workflow: str
    custom_nodes: List[str] = []
    name: Optional[str] = None
    partitions: Optional[DailyPartitions] = None
    cron_schedule: Optional[str] = None
    schedule_hour: Optional[int] = None
    sensor_folder: Optional[str] = None
    sensor_asset: Optional[str] = None  # asset key ("a/b") that each new folder materializes
    external_deps: Dict[str, List[str]] = {}  # step name or node id -> upstream asset keys ("a/b")
    op_tags: Dict[str, Any] = {}
    job_tags: Dict[str, str] = {}
    overridable_functions: List[str] = []
    executor: Optional[Literal["in_process", "multiprocess"]] = None
    notes_dir: Optional[str] = None  # relative to this file's folder; several components may share one
    notes_keep: Optional[int] = None

    def workflow_spec(self, base: Path) -> GraphbookWorkflow:
        """The Python declaration this YAML stands for; relative paths resolve against ``base``."""

        def path(p: str) -> Path:
            return (base / p).resolve()

        partitions = None
        if self.partitions is not None:
            partitions = daily_partitions(self.partitions.start_date, end_offset=self.partitions.end_offset, timezone=self.partitions.timezone)
        return GraphbookWorkflow(
            path(self.workflow),
            custom_nodes=[path(p) for p in self.custom_nodes],
            name=self.name,
            partitions_def=partitions,
            cron_schedule=self.cron_schedule,
            schedule_hour=self.schedule_hour,
            op_tags=dict(self.op_tags),
            job_tags=dict(self.job_tags),
            overridable_functions=tuple(self.overridable_functions),
            external_deps={step: [dg.AssetKey.from_user_string(k) for k in keys] for step, keys in self.external_deps.items()},
            sensor=FolderSensor(path(self.sensor_folder), asset_key=self.sensor_asset) if self.sensor_folder else None,
            executor=self.executor,
            notes_dir=str(path(self.notes_dir)) if self.notes_dir and "://" not in self.notes_dir else self.notes_dir,
            notes_keep=self.notes_keep,
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return build_definitions([self.workflow_spec(Path(context.path))])
