"""A workflow's job as the runner builds it, and rebuilt in whichever process runs a step."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union

import dagster as dg

from ..authoring.graph import Graph
from ..defs.definitions import GraphbookWorkflow, build_workflow
from ..defs.executor import import_executor
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


def workflow_recon(
    workflow: Any,
    spec: GraphbookWorkflow,
    name: Optional[str],
    notes_dir: Optional[str],
    streaming: Union[bool, Sequence[str]],
    translator: GraphbookTranslator,
    executor: Optional[str] = None,
) -> Any:
    """The workflow's job, rebuilt from its file in whichever process runs a step (with the
    run's executor where it is not one of ``graphbook_executor``'s modes)."""
    stream = streaming if isinstance(streaming, bool) else tuple(streaming)
    args = (
        _source_path(workflow),
        tuple(spec.custom_nodes),
        name,
        notes_dir,
        stream,
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
