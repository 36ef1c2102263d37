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

from .translator import safe_name
from .workflow import workflow_name

LOAD_ERROR_TAG = "dagster_graphbook/load_error"


def broken_job_name(spec: Any) -> str:
    """The job name the workflow would have had (its ``name``, else the file stem's)."""
    if spec.name:
        return safe_name(spec.name)
    source = spec.source
    stem = getattr(source, "name", None) if not isinstance(source, (str, Path)) else None
    return workflow_name(stem or Path(str(source)).stem)


def load_error_job(spec: Any, error: Exception) -> dg.JobDefinition:
    """A job standing for a workflow that failed to load: its description and its one op's
    failure carry the load error (file, node and reason)."""
    message = str(error)
    name = broken_job_name(spec)

    @dg.op(name=f"{name}__load_error", description=message)
    def _load_error(context) -> None:  # noqa: ANN001 (Dagster passes its context)
        raise dg.Failure(description=f"this workflow failed to load, so it cannot run:\n{message}")

    @dg.job(name=name, description=f"FAILED TO LOAD: {message}", tags={LOAD_ERROR_TAG: "true"})
    def _job() -> None:
        _load_error()

    return _job
