"""A workflow's job as the runner builds it, and rebuilt in whichever process runs a step."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Optional, Tuple

import dagster as dg

from ..authoring.graph import Graph
from ..defs.definitions import GraphbookWorkflow, build_workflow
from ..defs.executor import import_executor
from ..errors import RequestError
from ..plan.job_steps import (
    NOTES_IO_MANAGER_KEY,
)
from ..plan.translator import (
    GraphbookTranslator,
    import_translator,
    path_of_translator,
)
from ..store.io_manager import notes_io_manager
from .console import failures_unsaid_console_logger

# run_workflow's own executors (graphbook_executor's modes); any other is a module:attr
OWN_EXECUTORS = (None, "in_process", "multiprocess")


def reconstruct_job(
    source: str,
    custom_nodes: Tuple[str, ...],
    name: Optional[str],
    notes_dir: Optional[str],
    streaming: Any = False,
    translator: Optional[str] = None,
    shards: Optional[str] = None,
    executor: Optional[str] = None,
    preview: Optional[str] = None,
    runtime: Optional[str] = None,
) -> dg.JobDefinition:
    """Rebuild the job in an executor's step process (multiprocess executor); ``translator`` is
    the ``module:Class`` of the run's translator, ``shards``, ``preview`` and ``runtime`` the
    run's settings as JSON, ``executor`` the ``module:attr`` of the run's executor
    (dagster-ray's)."""
    spec = GraphbookWorkflow(
        source,
        custom_nodes=custom_nodes,
        name=name,
        streaming=streaming,
        shards=json.loads(shards) if shards else None,
        executor=import_executor(executor) if executor else None,
        preview=json.loads(preview) if preview else None,
        runtime=json.loads(runtime) if runtime else None,
    )
    defs = workflow_definitions(spec, notes_dir, import_translator(translator))[0]
    return defs.resolve_job_def(list(defs.jobs or ())[0].name)


def workflow_definitions(
    spec: GraphbookWorkflow,
    notes_dir: Optional[str],
    translator: Optional[GraphbookTranslator] = None,
) -> Tuple[dg.Definitions, Any]:
    spec = replace(spec, notes_dir=notes_dir)
    wdefs = build_workflow(spec, translator)
    defs = dg.Definitions(
        assets=wdefs.assets,
        jobs=[wdefs.job],
        resources={NOTES_IO_MANAGER_KEY: notes_io_manager, **wdefs.resources},
        loggers={"console": failures_unsaid_console_logger},
    )
    return defs, wdefs


# What a step process rebuilds a run_workflow job from (reconstruct_job's arguments); a
# GraphbookWorkflow setting any other option runs in process, or from its code location.
REBUILT = ("source", "custom_nodes", "name", "streaming", "shards", "preview", "runtime")


def workflow_recon(
    spec: GraphbookWorkflow,
    notes_dir: Optional[str],
    translator: GraphbookTranslator,
    executor: Optional[str] = None,
) -> Any:
    """The workflow's job, rebuilt from its file in whichever process runs a step (with the
    run's executor where it is not one of ``graphbook_executor``'s modes)."""
    default = GraphbookWorkflow(spec.source)
    kept = {"notes_dir", "executor"} if executor not in OWN_EXECUTORS else {"notes_dir"}
    lost = [
        f.name
        for f in fields(spec)
        if f.name not in REBUILT and f.name not in kept
        and getattr(spec, f.name) != getattr(default, f.name)
    ]  # fmt: skip
    if lost:
        raise RequestError(
            f"workflow {spec.source}: its steps would run in processes of their own, which "
            f"rebuild the job from the workflow file, but not its {', '.join(lost)}: run it in "
            "process, or as a job of its code location (run_job, `dagster-graphbook "
            "materialize`)"
        )
    streaming = spec.streaming
    args = (
        _source_path(spec.source),
        tuple(str(p) for p in spec.custom_nodes),
        spec.name,
        notes_dir,
        streaming if isinstance(streaming, bool) else tuple(streaming),
        path_of_translator(translator),
        json.dumps(spec.shards) if spec.shards is not None else None,
        None if executor in OWN_EXECUTORS else executor,
        json.dumps(spec.preview) if spec.preview is not None else None,
        json.dumps(spec.runtime) if spec.runtime is not None else None,
    )
    return dg.build_reconstructable_job(
        "dagster_graphbook.runner.rebuild",
        "reconstruct_job",
        reconstructable_args=args,  # type: ignore[arg-type]  # dagster annotates tuple[object]
    )


def _source_path(workflow: Any) -> str:
    if isinstance(workflow, Graph):
        if not workflow.module_name:
            raise ValueError(
                "the multiprocess and Ray executors rebuild the workflow in each step "
                "process: define the Graph in a file with @g()"
            )
        return workflow.module_name
    return str(Path(workflow).resolve())
