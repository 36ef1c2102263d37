"""What a job says of the workflow steps its ops run, read from the job alone (a code location's
job, whose workflow and translator are not at hand; the store, execution and the CLI read these
names, which the plan writes): the ``dagster_graphbook/steps`` op tag the
translator writes, and which step parameters hold a ``{partition_key}`` a run must fill in."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

import dagster as dg

from ..errors import quoted

# Op tag naming the steps an op runs and the asset of each pin: how a job of a code location,
# whose translator is not at hand, maps ``STEP.PARAM`` and stored notes back to steps.
STEPS_TAG = "dagster_graphbook/steps"
PARTITION_PLACEHOLDER = "{partition_key}"
GRAPHBOOK_META = "graphbook"  # a step asset's definition metadata entry (``node_info``)
# resource key of the IO manager that stores every step asset's notes (store/io_manager.py)
NOTES_IO_MANAGER_KEY = "graphbook_notes"


@dataclass(frozen=True)
class TaggedStep:
    """A step as an op's `STEPS_TAG` describes it (see `read_steps_tag`)."""

    op_name: str  # the step's op name (inside a streaming op: its config key)
    refs: Tuple[str, ...]
    pins: Mapping[dg.AssetKey, str]  # asset key -> pin
    code: Tuple[str, ...] = ()  # parameters holding code (function source)
    # what a user may call a resource the step uses (label, class, node id) -> its resource key
    resources: Mapping[str, str] = field(default_factory=dict)

    @property
    def step(self) -> str:
        return self.refs[0]


def read_steps_tag(op_tags: Mapping[str, Any]) -> List[TaggedStep]:
    """The steps an op runs, from its `STEPS_TAG` (none for an op that is not a step's)."""
    raw = op_tags.get(STEPS_TAG)
    entries = json.loads(raw) if isinstance(raw, str) else raw or []
    return [
        TaggedStep(
            e["op"],
            tuple(e["refs"]),
            {dg.AssetKey(path): pin for path, pin in e["assets"]},
            tuple(e.get("code", ())),
            dict(e.get("resources", {})),
        )
        for e in entries
    ]


def holds_placeholder(value: Any) -> bool:
    """Whether ``value`` (a string, a path, or a list, tuple or dict of them) holds
    ``{partition_key}``."""
    if isinstance(value, (str, os.PathLike)):
        return PARTITION_PLACEHOLDER in str(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return any(holds_placeholder(v) for v in value)
    if isinstance(value, Mapping):
        return any(holds_placeholder(v) for v in value.values())
    return False


def fill_placeholder(value: Any, partition_key: str) -> Any:
    """``value`` with ``partition_key`` for each ``{partition_key}`` of its strings, in lists,
    tuples and dicts too; a path stays a path of its type, a tuple a tuple."""
    if isinstance(value, str):
        return value.replace(PARTITION_PLACEHOLDER, partition_key)
    if isinstance(value, os.PathLike):
        filled = str(os.fspath(value)).replace(PARTITION_PLACEHOLDER, partition_key)
        return type(value)(filled)  # type: ignore[call-arg]  # pathlib's paths take a str
    if isinstance(value, (list, tuple)):
        return type(value)(fill_placeholder(v, partition_key) for v in value)
    if isinstance(value, dict):
        return {k: fill_placeholder(v, partition_key) for k, v in value.items()}
    return value


def as_config_value(value: Any) -> Any:
    """A class default as the launchpad's field holds it: paths as strings, tuples as lists."""
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return [as_config_value(v) for v in value]
    if isinstance(value, dict):
        return {k: as_config_value(v) for k, v in value.items()}
    return value


def unfilled_placeholders(config: Mapping[str, Any], code_params: Iterable[str]) -> Dict[str, Any]:
    """The parameters (name -> value) holding ``{partition_key}`` (in a string, or a list or
    dict of them), which only a run of one partition fills in; parameters holding code are left
    out (never filled in)."""
    code = set(code_params)
    return {k: v for k, v in config.items() if k not in code and holds_placeholder(v)}


def node_tags(node: Any) -> Mapping[str, Any]:
    """The op tags of a job's top-level node; a sharded step is a graph, whose inner ops each
    carry the step's tags."""
    for inner in getattr(node.definition, "node_defs", ()):  # a GraphDefinition
        if STEPS_TAG in inner.tags:
            return inner.tags
    return node.definition.tags


def unfilled_in_job(
    job: dg.JobDefinition, run_config: Mapping[str, Any], op_names: Optional[Iterable[str]] = None
) -> Dict[str, Any]:
    """``STEP.PARAM -> value`` of every step parameter holding ``{partition_key}`` in ``run_config``
    (resolved: defaults filled in), for the ops ``op_names`` (default: all)."""
    wanted = None if op_names is None else set(op_names)
    found: Dict[str, Any] = {}
    for node, step, body in _step_configs(job, run_config):
        if wanted is None or node.name in wanted:
            for param, value in unfilled_placeholders(body, step.code).items():
                found[f"{step.step}.{param}"] = value
    return found


def _step_configs(
    job: dg.JobDefinition, run_config: Mapping[str, Any]
) -> Iterator[Tuple[Any, TaggedStep, Dict[str, Any]]]:
    """``(top-level node, step, the step's config)`` for every step the job's ops run, read from
    resolved ``run_config``: a streaming op's steps each under their op name, a sharded step's
    under its graph's inner ops."""
    ops = run_config.get("ops") or {}
    for node in job.graph.nodes:
        for step in read_steps_tag(node_tags(node)):
            body = _node_config(ops, node.name)
            if step.op_name != node.name:  # a streaming op: each step's config under its op name
                body = body.get(step.op_name) or {}
            yield node, step, body


def _node_config(ops: Mapping[str, Any], name: str) -> Dict[str, Any]:
    """A top-level node's resolved config; a sharded step's graph maps its config onto each of
    its inner ops (``<node>.<inner op>``), whose config is then the step's."""
    body = (ops.get(name) or {}).get("config")
    if body is None:
        inner = (v.get("config") for k, v in ops.items() if k.startswith(f"{name}.") and v)
        body = next((c for c in inner if c), None)
    return dict(body or {})


def runtime_problems(job: dg.JobDefinition, run_config: Mapping[str, Any]) -> Dict[str, str]:
    """``STEP.runtime -> what is wrong`` for each step whose ``runtime`` block in ``run_config``
    (resolved) no run could take (``shards: 0``, both ``shards`` and ``shard_size`` changed):
    refused before the run starts, not when the step's turn comes after hours of upstream work."""
    from .settings import RUNTIME_KEY, read_runtime, runtime_kind, runtime_problem

    found: Dict[str, str] = {}
    for node, step, body in _step_configs(job, run_config):
        block = body.get(RUNTIME_KEY)
        if not isinstance(block, Mapping):
            continue
        try:
            read_runtime(runtime_kind(block), block, _shard_defaults(node))
        except ValueError as exc:  # pydantic's ValidationError is one
            found[f"{step.step}.runtime"] = runtime_problem(exc)
    return found


def _shard_defaults(node: Any) -> Optional[Dict[str, Any]]:
    """A sharded step's launchpad defaults of ``shards``/``shard_size`` (its graph's config
    mapping holds them); None for any other node."""
    mapping = getattr(node.definition, "config_mapping", None)
    if mapping is None:
        return None
    runtime = mapping.config_schema.config_type.fields.get("runtime")
    defaults = runtime.default_value if runtime is not None and runtime.default_provided else {}
    return {k: defaults.get(k) for k in ("shards", "shard_size")}


def placeholder_message(found: Mapping[str, Any], partitioned: bool) -> str:
    """Why a run without a partition key cannot fill the parameters ``found`` (``STEP.PARAM`` ->
    value), and what to do."""
    params = ", ".join(f"{k} {quoted(v)}" for k, v in found.items())
    fix = (
        "run one partition (--partition KEY)"
        if partitioned
        else f"set it (--set {next(iter(found))}=VALUE) or give the workflow partitions "
        "(partitions_def=, YAML partitions:) and run one"
    )
    return f"{params}: this run has no partition key to fill in; {fix}"


def read_node_info(metadata: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The ``graphbook`` entry of definition metadata, raw or wrapped in a MetadataValue."""
    value = (metadata or {}).get(GRAPHBOOK_META)
    value = getattr(value, "value", value)
    return dict(value) if isinstance(value, Mapping) else {}


def job_source(job: dg.JobDefinition) -> str:
    """``job NAME (workflow FILE)``: the file its steps' assets name (``graphbook`` metadata)."""
    graph = job.asset_layer.asset_graph if job.asset_layer else None
    if not graph:
        return f"job {job.name}"
    for node in job.graph.nodes:
        for step in read_steps_tag(node_tags(node)):
            for key in step.pins:
                found = read_node_info(graph.get(key).metadata if graph.has(key) else None)
                if found.get("workflow"):
                    return f"job {job.name} (workflow {found['workflow']})"
    return f"job {job.name}"
