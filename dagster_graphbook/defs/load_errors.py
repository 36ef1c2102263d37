"""A workflow that fails to load, kept visible as a job that says why.

One broken workflow file must not take the whole code location down (every other job would
vanish from the UI). ``build_definitions`` puts a job of the broken workflow's name in its place:
the Jobs page shows the error as the job's description, and launching it fails with the same
message, so a UI user sees what to fix where the workflow used to be.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from ..model.workflow import Workflow, workflow_name
from ..plan.translator import GraphbookTranslator, safe_name

LOAD_ERROR_TAG = "dagster_graphbook/load_error"


def broken_job_name(spec: Any) -> str:
    """The job name the workflow would have had (its ``name``, else the file stem's)."""
    if spec.name:
        return safe_name(spec.name)
    source = spec.source
    stem = getattr(source, "name", None) if not isinstance(source, (str, Path)) else None
    return workflow_name(stem or Path(str(source)).stem)


def translated_job_name(spec: Any, translator: GraphbookTranslator) -> str:
    """The name the translator gives the job, asked of a workflow with no nodes (the file did
    not load): an override of ``get_job_name`` renames the broken job as it renames the
    others. A hook that needs the nodes falls back to the workflow's own name."""
    name = broken_job_name(spec)
    source = spec.source
    path = Path(source) if isinstance(source, (str, Path)) else None
    try:
        return translator.get_job_name(Workflow(name=name, nodes={}, path=path))
    except Exception:  # noqa: BLE001 (the hook saw an empty workflow; its load error is shown)
        return name


def load_error_job(
    spec: Any, error: Exception, translator: GraphbookTranslator | None = None
) -> dg.JobDefinition:
    """A job standing for a workflow that failed to load: its description and its one op's
    failure carry the load error (file, node and reason)."""
    message = str(error)
    name = translated_job_name(spec, translator or GraphbookTranslator())

    @dg.op(name=f"{name}__load_error", description=message)
    def _load_error(context) -> None:  # noqa: ANN001 (Dagster passes its context)
        raise dg.Failure(description=f"this workflow failed to load, so it cannot run:\n{message}")

    @dg.job(name=name, description=f"FAILED TO LOAD: {message}", tags={LOAD_ERROR_TAG: "true"})
    def _job() -> None:
        _load_error()

    return _job
