"""Which step is X: the one rule by which a user's name for a step (its step name, node id, class
name or label) finds it, for every setting that names steps (streaming segments, checks,
external deps, GPUs, ``STEP.PARAM``)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Sequence, Tuple

from ..model.workflow import WorkflowError


def step_refs_of(node: Any, step: str) -> Tuple[str, ...]:
    """What a user may call a step by: its step name, node id, class name and label."""
    return tuple(r for r in (step, node.id, node.name, node.label) if r)


def resolve_refs(items: Iterable[Tuple[Sequence[str], Any]]) -> Dict[str, Any]:
    """``(refs, value)`` pairs -> ref -> value; a step name (first ref) wins over the others. A
    name that several share otherwise (a class name, a label, two resources of one class) names
    none of them (`shared_refs`): a setting given to it reached only one, silently."""
    items = list(items)
    shared = shared_refs(items)
    refs: Dict[str, Any] = {}
    for names, value in items:
        for ref in names[1:]:
            if ref:
                refs.setdefault(ref, value)
    refs.update({names[0]: value for names, value in items})
    return {ref: value for ref, value in refs.items() if ref not in shared}


def shared_refs(items: Iterable[Tuple[Sequence[str], Any]]) -> Dict[str, List[str]]:
    """Each name that several items answer to (and that is not one item's own first name) ->
    a name of each of them that is theirs alone, for an error saying which to use instead."""
    items = list(items)
    owners: Dict[str, List[int]] = {}
    firsts: Dict[str, int] = {}
    for i, (names, _) in enumerate(items):
        for ref in dict.fromkeys(r for r in names if r):
            owners.setdefault(ref, []).append(i)
        if names and names[0]:
            firsts[names[0]] = firsts.get(names[0], 0) + 1
    shared = {ref for ref, who in owners.items() if len(who) > 1 and firsts.get(ref) != 1}

    def own(i: int) -> str:
        names = items[i][0]
        return next((r for r in names if r and r not in shared), names[0])

    return {ref: [own(i) for i in owners[ref]] for ref in shared}


def resolve_per_step(
    workflow: Any,
    name: str,
    setting: Any,
    step_names: Mapping[str, str],
    value: Callable[[str, Any], Any],
    per: str,
) -> Dict[str, Any]:
    """Node id -> ``value(where, v)`` for a per-step workflow option (``gpus=``, ``shards=``):
    an int applies to every batch step; a mapping names steps by this module's rule. A setting
    of another type and an unknown step are load errors naming the option; ``value`` checks each
    value (``where``: ``name`` or ``name[ref]``). ``per``: what the mapping maps a step to."""
    if setting is None:
        return {}
    if isinstance(setting, bool) or not isinstance(setting, (int, Mapping)):
        raise WorkflowError(
            workflow.source,
            [f"{name} must be a whole number or a mapping of step -> {per}, got {setting!r}"],
        )
    if isinstance(setting, int):
        checked = value(name, setting)
        return {n.id: checked for n in workflow.steps() if n.step_kind == "batch"}
    refs = resolve_refs((step_refs_of(n, step_names[n.id]), n) for n in workflow.steps())
    out: Dict[str, Any] = {}
    for ref, given in setting.items():
        node = refs.get(str(ref))
        if node is None:
            steps = ", ".join(step_names[n.id] for n in workflow.steps())
            raise WorkflowError(
                workflow.source,
                [f"{name} names step {ref!r}, which is not in the workflow (steps: {steps})"],
            )
        out[node.id] = value(f"{name}[{ref!r}]", given)
    return out
