"""A workflow's job as the runner builds it, and rebuilt in whichever process runs a step."""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, List, Optional, Tuple

import dagster as dg

from ..authoring.graph import Graph
from ..defs.definitions import GraphbookWorkflow, build_workflow
from ..defs.executor import import_executor
from ..errors import RequestError
from ..model.workflow import Workflow
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
    run's settings as JSON, ``executor`` the workflow's executor by name (``multiprocess``) or
    the ``module:attr`` of the run's (dagster-ray's)."""
    spec = GraphbookWorkflow(
        source,
        custom_nodes=custom_nodes,
        name=name,
        streaming=streaming,
        shards=json.loads(shards) if shards else None,
        executor=executor if executor in OWN_EXECUTORS else import_executor(executor),
        preview=json.loads(preview) if preview else None,
        runtime=json.loads(runtime) if runtime else None,
    )
    spec = replace(spec, notes_dir=notes_dir)
    defs = workflow_definitions(spec, import_translator(translator))[0]
    return defs.resolve_job_def(list(defs.jobs or ())[0].name)


def workflow_definitions(
    spec: GraphbookWorkflow, translator: Optional[GraphbookTranslator] = None
) -> Tuple[dg.Definitions, Any]:
    wdefs = build_workflow(spec, translator)
    defs = dg.Definitions(
        assets=wdefs.assets,
        jobs=[wdefs.job],
        resources={NOTES_IO_MANAGER_KEY: notes_io_manager, **wdefs.resources},
        loggers={"console": failures_unsaid_console_logger},
    )
    return defs, wdefs


# What a step process rebuilds a run_workflow job from (reconstruct_job's arguments), and the
# options that make a code location's schedules, sensors and automation, not what a run's steps
# do; a GraphbookWorkflow that sets any other option runs in process, or from its code location.
REBUILT = ("source", "custom_nodes", "name", "streaming", "shards", "preview", "runtime")
NOT_IN_STEPS = ("notes_dir", "cron_schedule", "schedule_hour", "sensor", "automation")
# The specs of the runs started here whose steps run here too (`reconstruct_here`), the latest
# few: a resumed in-process run rebuilds its job from the whole spec, whatever its options.
_HERE: OrderedDict[str, Tuple[GraphbookWorkflow, GraphbookTranslator]] = OrderedDict()
_HERE_KEPT = 16


def reconstruct_here(key: str) -> dg.JobDefinition:
    """The job of a run started in this process whose steps run here too (`workflow_recon`)."""
    if key not in _HERE:
        raise RequestError(
            "this run's job is rebuilt only in the process that started it (a run_workflow "
            "GraphbookWorkflow run in process): resume it from that process"
        )
    spec, translator = _HERE[key]
    defs = workflow_definitions(spec, translator)[0]
    return defs.resolve_job_def(list(defs.jobs or ())[0].name)


def workflow_recon(
    spec: GraphbookWorkflow, translator: GraphbookTranslator, mode: str = "multiprocess"
) -> Any:
    """The workflow's job, rebuilt wherever a step of a run in ``mode`` runs: in this process
    (``in_process``) from ``spec`` itself, else from its file and the options ``REBUILT`` (an
    executor named by a string too); a spec with other options is refused, naming them."""
    if mode == "in_process":
        key = uuid.uuid4().hex
        _HERE[key] = (spec, translator)
        while len(_HERE) > _HERE_KEPT:
            _HERE.popitem(last=False)
        return dg.build_reconstructable_job(
            "dagster_graphbook.runner.rebuild", "reconstruct_here", reconstructable_args=(key,)
        )
    executor = spec.executor if isinstance(spec.executor, str) else None
    lost = _lost_options(spec)
    if lost:
        raise RequestError(
            f"workflow {spec.source}: its steps would run in processes of their own, which "
            f"rebuild the job from the workflow file, but not its {', '.join(lost)}: run it in "
            "process (executor='in_process'), or as a job of its code location (run_job, "
            "`dagster-graphbook materialize`)"
        )
    streaming = spec.streaming
    args = (
        _source_path(spec.source),
        tuple(str(p) for p in spec.custom_nodes),
        spec.name,
        spec.notes_dir,
        streaming if isinstance(streaming, bool) else tuple(streaming),
        path_of_translator(translator),
        json.dumps(spec.shards) if spec.shards is not None else None,
        executor,
        json.dumps(spec.preview) if spec.preview is not None else None,
        json.dumps(spec.runtime) if spec.runtime is not None else None,
    )
    return dg.build_reconstructable_job(
        "dagster_graphbook.runner.rebuild",
        "reconstruct_job",
        reconstructable_args=args,  # type: ignore[arg-type]  # dagster annotates tuple[object]
    )


def _lost_options(spec: GraphbookWorkflow) -> List[str]:
    """The options of ``spec`` that a step process rebuilding its job would not have: set (an
    empty list is as unset as the default empty tuple) and neither rebuilt nor outside steps."""
    return [
        f.name
        for f in fields(spec)
        if f.name not in REBUILT + NOT_IN_STEPS
        and not (f.name == "executor" and (spec.executor is None or isinstance(spec.executor, str)))
        and not left_unset(f.name, getattr(spec, f.name))
    ]


def left_unset(option: str, value: Any) -> bool:
    """``value`` is ``GraphbookWorkflow``'s default for ``option`` (an empty list is as unset as
    the default empty tuple)."""
    default = getattr(_DEFAULTS, option)
    return (tuple(value) if isinstance(value, list) else value) == (
        tuple(default) if isinstance(default, list) else default
    )


_DEFAULTS = GraphbookWorkflow("<defaults>")


def _source_path(workflow: Any) -> str:
    if isinstance(workflow, Workflow):
        raise RequestError(
            f"workflow {workflow.source}: a Workflow object is not rebuilt in each step process "
            "(the multiprocess and Ray executors do): give its file, or run it in process"
        )
    if isinstance(workflow, Graph):
        if not workflow.module_name:
            raise ValueError(
                "the multiprocess and Ray executors rebuild the workflow in each step "
                "process: define the Graph in a file with @g()"
            )
        return workflow.module_name
    return str(Path(workflow).resolve())
