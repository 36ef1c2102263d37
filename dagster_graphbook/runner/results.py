"""What a finished run gives back: its outcome and the notes its materializations stored."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import dagster as dg
from upath import UPath

from ..plan.translator import (
    GraphbookTranslator,
)
from ..store.versions import read_notes, run_lineage, stored_notes_path
from .failure import failure_message


@dataclass
class WorkflowRun:
    """A finished run: its id, outcome and the notes of every step and pin."""

    run_id: str
    success: bool
    seconds: float
    notes: Dict[str, Dict[str, List[Any]]] = field(
        default_factory=dict
    )  # step name -> pin -> notes
    failure: Optional[str] = None  # each failure: its headline, then where it was raised
    metadata: Dict[str, Dict[str, Any]] = field(
        default_factory=dict
    )  # asset key -> its materialization's metadata values
    dagster_home: Optional[str] = None  # the instance that recorded the run

    def log_hint(self) -> str:
        """Where the run's full event log (tracebacks included) is."""
        home = self.dagster_home or "$DAGSTER_HOME"
        return (
            f"full log (traceback included): run {self.run_id} in `DAGSTER_HOME={home} dagster dev`"
        )

    def __getitem__(self, step: str) -> Dict[str, List[Any]]:
        return self.notes[step]

    def counts(self) -> Dict[str, Dict[str, int]]:
        return {s: {p: len(n) for p, n in pins.items()} for s, pins in self.notes.items()}


def materializations(
    instance: dg.DagsterInstance, run_id: str
) -> Dict[dg.AssetKey, dg.AssetMaterialization]:
    """The materializations of run ``run_id`` and, for the assets it did not materialize, of the
    runs it re-executes (nearest first): a resumed run's outputs include the reused steps'."""
    found: Dict[dg.AssetKey, dg.AssetMaterialization] = {}
    for lineage_id in run_lineage(instance, run_id):
        records = instance.all_logs(lineage_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        found_in_run = (r.asset_materialization for r in records)
        ran = {m.asset_key: m for m in found_in_run if m is not None}  # None: other event types
        found = {**ran, **found}  # a run's last, the nearest run's first
    return found


def stored_notes(
    found: Mapping[dg.AssetKey, dg.AssetMaterialization],
    pins: Iterable[Tuple[dg.AssetKey, str, str]],
) -> Dict[str, Dict[str, List[Any]]]:
    """Step -> pin -> notes, for each ``(asset key, step, pin)`` of ``pins`` (in that order) that
    a materialization in ``found`` (`materializations`: this run's, or a resumed run's reused
    ones) stored notes of, read back through ``versions.read_notes`` from its ``dagster/uri``."""
    out: Dict[str, Dict[str, List[Any]]] = {}
    for key, step, pin in pins:
        materialization = found.get(key)
        if materialization is None:
            continue  # a pin inside a stream, or a step that did not run
        stored = stored_notes_path(materialization.metadata)
        if stored is not None:
            notes = read_notes(UPath(stored), key, materialization.partition)
            out.setdefault(step, {})[pin] = notes
    return out


def load_notes(
    run_id: str, wdefs: Any, translator: GraphbookTranslator, instance: dg.DagsterInstance
) -> Dict[str, Dict[str, List[Any]]]:
    """The notes of every step of a workflow's run (an entry for each step; a pin inside a
    stream stores no notes)."""
    steps = list(translator.names(wdefs.workflow).steps.values())
    pins = [(spec.key, step.step, pin) for step in steps for pin, spec in step.specs.items()]
    stored = stored_notes(materializations(instance, run_id), pins)
    return {step.step: stored.get(step.step, {}) for step in steps}


def finished_run(
    instance: dg.DagsterInstance, run_id: str, success: bool, start: float
) -> WorkflowRun:
    """The ``WorkflowRun`` of a run that ended (its notes are read by the caller)."""
    return WorkflowRun(
        run_id,
        success,
        time.perf_counter() - start,
        failure=None if success else failure_message(instance, run_id),
        dagster_home=instance.root_directory,
    )
