"""A run's config from ``--set STEP.PARAM`` values, checked before any run starts."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import dagster as dg

from ..dagster_internals import (
    deep_merge_dicts,
)
from ..errors import RequestError
from ..model import params as ptypes
from ..model.workflow import Workflow, WorkflowError
from ..plan.job_steps import (
    TaggedStep,
    job_source,
    node_tags,
    placeholder_message,
    read_steps_tag,
    runtime_problems,
    unfilled_in_job,
)
from ..plan.translator import (
    GraphbookTranslator,
    resolve_refs,
)

_ConfigTarget = Tuple[str, str, Tuple[str, ...]]  # (section, name, path): where a STEP's config is


def _params_config(
    params: Mapping[str, Any],
    targets: Mapping[str, _ConfigTarget],
    refused: Callable[[str], Exception],
) -> Dict[str, Any]:
    """The run config that sets each ``{"STEP.PARAM": value}`` of ``params``. ``targets``: each
    name STEP may be -> the config its PARAM goes under, ``config[section][name]["config"][*path]``
    (``("ops", op, ())``, a step of a streaming op ``("ops", op, (step op,))``, a resource
    ``("resources", key, ())``); ``refused(key)``: the error for a key whose STEP is none of
    them, or that has no PARAM. `_with_params` sets it over a caller's run config."""
    config: Dict[str, Any] = {}
    for key, value in params.items():
        step, _, path = key.partition(".")
        if step not in targets or not path:
            raise refused(key)
        section, name, within = targets[step]
        target = config.setdefault(section, {}).setdefault(name, {}).setdefault("config", {})
        *parents, leaf = [*within, *path.split(".")]
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    return config


def _cannot_set(
    source: str,
    steps: Sequence[str],
    key: str,
    *,
    resources: Sequence[str] = (),
    shared: Optional[Mapping[str, Sequence[str]]] = None,
) -> WorkflowError:
    """The refusal of ``--set key=...`` whose STEP names no step (or resource) of ``source``,
    or (``shared``: a name -> what it names) several of them."""
    name = key.partition(".")[0]
    if shared and name in shared:  # two steps of one class, two resources of one class
        return WorkflowError(
            source,
            [
                f"cannot set {key!r}: {name!r} names several steps or resources "
                f"({', '.join(shared[name])}): name the one to set"
            ],
        )
    also = f" (or RESOURCE.PARAM with RESOURCE one of {', '.join(resources)})" if resources else ""
    return WorkflowError(
        source,
        [f"cannot set {key!r}: expected STEP.PARAM with STEP one of {', '.join(steps)}{also}"],
    )


def _with_params(
    run_config: Optional[Mapping[str, Any]], from_params: Mapping[str, Any]
) -> Dict[str, Any]:
    """``run_config`` with the config of ``--set`` params (`_params_config`) merged in deeply:
    a param replaces only its own value, never the rest of its op's config that ``run_config``
    gives (``runtime.max_skipped_fraction`` beside a param's ``runtime.on_item_error``)."""
    return dict(deep_merge_dicts(dict(run_config or {}), from_params))


def run_config_for(
    workflow: Workflow, params: Mapping[str, Any], translator: Optional[GraphbookTranslator] = None
) -> Dict[str, Any]:
    """``{"Step.param": v, "Step.runtime.num_workers": 0}`` -> Dagster run config."""
    translator = translator or GraphbookTranslator()
    names = translator.names(workflow)
    steps = {ref: s.op_name for ref, s in names.step_refs().items()}  # step, label, class, id
    targets: Dict[str, _ConfigTarget] = {
        **{ref: ("resources", key, ()) for ref, key in names.resource_refs.items()},
        **{ref: ("ops", op, ()) for ref, op in steps.items()},  # a step's name wins
    }

    refused = partial(_cannot_set, workflow.source, sorted(set(steps)), shared=names.shared)
    sections = _params_config(params, targets, refused)
    return {s: sections[s] for s in ("ops", "resources") if s in sections}


def workflow_config(
    wdefs: Any,
    job: dg.JobDefinition,
    params: Optional[Mapping[str, Any]],
    run_config: Optional[Mapping[str, Any]],
    partition_key: Optional[str],
    streaming: Union[bool, Sequence[str]],
    translator: GraphbookTranslator,
) -> Dict[str, Any]:
    """The run config of a workflow's run: ``run_config`` with ``params`` (``--set``) in it."""
    config = _with_params(run_config, run_config_for(wdefs.workflow, params or {}, translator))
    if streaming:
        from ..plan.segments import nest_step_config

        config = nest_step_config(config, wdefs.workflow, translator, streaming=streaming)
    return _request_config(config, job, partition_key, f"workflow {wdefs.workflow.source}")


def job_config(
    job: dg.JobDefinition,
    tagged: List[Tuple[str, TaggedStep]],
    params: Optional[Mapping[str, Any]],
    partition_key: Optional[str],
    run_config: Optional[Mapping[str, Any]],
) -> Dict[str, Any]:
    """The run config of a code location job's run: ``run_config`` with ``{"Step.param":
    value}`` set over it."""
    if job.partitions_def is not None and partition_key is None:
        raise RequestError(
            f"{job_source(job)} is partitioned: give a partition key (--partition "
            f"{job.partitions_def.get_last_partition_key()}, the latest)"
        )
    targets: Dict[str, _ConfigTarget] = {  # resources, as in run_config_for; a step's name wins
        ref: ("resources", key, ()) for _, t in tagged for ref, key in t.resources.items()
    }
    targets.update(  # a step of a streaming op: under the one op's config
        (ref, ("ops", op, () if op == step.op_name else (step.op_name,)))
        for ref, (op, step) in resolve_refs((t.refs, (op, t)) for op, t in tagged).items()
    )

    steps = sorted(t.step for _, t in tagged)
    resources = sorted({r for _, t in tagged for r in t.resources})
    refused = partial(_cannot_set, job.name, steps, resources=resources)
    config = _with_params(run_config, _params_config(params or {}, targets, refused))
    return _request_config(config, job, partition_key, job_source(job))


def _request_config(
    config: Dict[str, Any], job: dg.JobDefinition, partition_key: Optional[str], source: str
) -> Dict[str, Any]:
    """``config`` with its ``--set`` texts read as their fields' types, refused before any run
    starts where the run could not go right: a partition key for a job without partitions
    (Dagster's own error is a CheckError traceback), config the job cannot take (said as
    ``STEP.PARAM``, not as Dagster's op path), a ``{partition_key}`` nothing fills in."""
    if partition_key is not None and job.partitions_def is None:
        raise RequestError(
            f"{source} has no partitions: run it without a partition key (--partition)"
        )
    schema = job.run_config_schema.config_type
    config = ptypes.read_text_values(config, schema)
    try:
        resolved = dg.validate_run_config(job, config)
    except dg.DagsterInvalidConfigError as exc:
        lines = ptypes.config_error_lines(exc, schema, _config_owner(job))
        head = f"{source}: " if len(lines) == 1 else f"{source}: {len(lines)} config errors:\n  - "
        raise RequestError(head + "\n  - ".join(lines)) from None
    found = unfilled_in_job(job, resolved) if partition_key is None else {}
    if found:
        raise RequestError(
            f"{source}: {placeholder_message(found, job.partitions_def is not None)}"
        )
    problems = runtime_problems(job, resolved)
    if problems:
        raise RequestError(f"{source}: " + "; ".join(f"{k}: {v}" for k, v in problems.items()))
    return config


def _config_owner(job: dg.JobDefinition) -> Any:
    """``path -> (step, path within the step's config)`` for a path of the job's run config
    (``ops.job__Step.config.param`` -> ``("Step", ["param"])``); resources by their key."""
    steps = {(op, None if t.op_name == op else t.op_name): t.step for op, t in tagged_steps(job)}

    def owner(parts: Sequence[str]) -> Optional[Tuple[str, Sequence[str]]]:
        if len(parts) < 3 or parts[2] != "config":
            return None
        section, name, rest = parts[0], parts[1], list(parts[3:])
        if section == "resources":
            return f"resource {name}", rest
        if section != "ops":
            return None
        if (name, None) in steps:
            return steps[(name, None)], rest
        if rest and (name, rest[0]) in steps:
            return steps[(name, rest[0])], rest[1:]
        return None

    return owner


def tagged_steps(job: dg.JobDefinition) -> List[Tuple[str, TaggedStep]]:
    """``(op name, step)`` for every step the job's ops run, as their op tags name them."""
    return [
        (node.name, step) for node in job.graph.nodes for step in read_steps_tag(node_tags(node))
    ]
