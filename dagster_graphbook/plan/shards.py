"""Sharded batch steps: one step's input notes split into contiguous shards, each shard its own
Dagster step (retried alone), then one commit step that merges them and materializes the step's
pins once (docs/sharding.md).

Sharding is decided when the workflow is defined (the op graph's shape depends on it):
``GraphbookWorkflow(shards={STEP: N})`` (or ``{STEP: {"shard_size": K}}``, or ``shards=N`` for
every batch step). The launchpad's ``runtime.shards`` / ``runtime.shard_size`` of a sharded step
then change how many shards a run makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Union

from ..model.workflow import Workflow, WorkflowError, WorkflowNode
from .code_version import node_code_version
from .refs import resolve_per_step

ShardSetting = Union[None, int, Mapping[str, Any]]
SHARD_KEYS = ("shards", "shard_size")
# a sharded step's figure saying which of its figures were summed or left out, and why
FIGURES_NOTE = "figures_note"


@dataclass(frozen=True)
class ShardPlan:
    """How a sharded step op is built: the defaults of its ``runtime.shards`` / ``shard_size``
    and the names of its three inner ops (plan, shard, commit)."""

    shards: int
    shard_size: Optional[int]
    plan_op: str
    shard_op: str
    commit_op: str
    gpus: Optional[int] = None  # GPUs each shard leases on its machine (gpus=; None: 1)
    # the step's code version (its class source, node file and values) as this process loaded
    # it: computed where the job is built, so in each step process from the code it imported
    # (a shard records it; the commit refuses shards of different versions)
    code_version: Optional[str] = None

    def runtime_defaults(self) -> Dict[str, Any]:
        """The step's launchpad defaults of the two settings."""
        return {"shards": self.shards, "shard_size": self.shard_size}


def resolve_shards(
    workflow: Workflow, setting: ShardSetting, step_names: Mapping[str, str]
) -> Dict[str, Dict[str, int]]:
    """Node id -> ``{"shards": N}`` or ``{"shard_size": K}``. An int applies to every batch
    step; a mapping names steps (step name, label, class name or node id), each with an int
    (shards) or a mapping of one of the two keys. Unknown steps and bad numbers are load errors;
    which steps may be sharded at all is the plan's to say (``shard_plan``)."""
    return resolve_per_step(
        workflow,
        "shards",
        setting,
        step_names,
        lambda where, v: _value(workflow, where, v),
        "shards",
    )


def _value(workflow: Workflow, where: str, value: Any) -> Dict[str, int]:
    """``{"shards": N}`` or ``{"shard_size": K}`` from an int or a mapping of one of the two."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"shards": value}
    problem = None
    if not isinstance(value, Mapping) or len(value) != 1 or next(iter(value)) not in SHARD_KEYS:
        problem = "a whole number of shards, {'shards': N} or {'shard_size': K}"
    else:
        number = next(iter(value.values()))
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            problem = "a whole number, 1 or more"
    if problem is not None:
        raise WorkflowError(workflow.source, [f"{where} must be {problem}, got {value!r}"])
    return dict(value)


def sharded_steps(workflow: Workflow) -> List[str]:
    """The names of the workflow's sharded steps (for messages), in node order."""
    return [
        node.label or node.name
        for node in workflow.nodes.values()
        if workflow.shards.get(node.id) not in (None, {}, {"shards": 1})
    ]


def shard_plan(
    workflow: Workflow,
    node: WorkflowNode,
    step: str,
    op_name: str,
    *,
    streamed: bool,
    inner_names: Any,
) -> Optional[ShardPlan]:
    """The shard decision of ``node``'s op (None: a plain op). A sharded step in a streaming
    segment, or a step that is not a batch step, is refused naming the workflow and the step.
    ``inner_names``: the translator's ``shard_op_names``."""
    value = workflow.shards.get(node.id)
    if not value or value == {"shards": 1}:
        return None
    where = f"workflow {workflow.name!r}, step {step!r} (node {node.id})"
    if node.step_kind != "batch":
        raise WorkflowError(
            workflow.source,
            [
                f"{where} asks for shards, but only batch steps can be sharded (it is a "
                f"{node.step_kind} step): drop it from shards"
            ],
        )
    if streamed:
        raise WorkflowError(
            workflow.source,
            [
                f"{where} asks for shards, but it is in the streaming segment, whose steps run "
                "in one process: leave it out of streaming, or drop it from shards"
            ],
        )
    plan_op, shard_op, commit_op = inner_names(op_name)
    return ShardPlan(
        shards=value.get("shards", 1),
        shard_size=value.get("shard_size"),
        plan_op=plan_op,
        shard_op=shard_op,
        commit_op=commit_op,
        gpus=workflow.gpus.get(node.id),
        code_version=node_code_version(node),
    )
