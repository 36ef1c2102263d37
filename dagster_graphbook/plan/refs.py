"""Which step is X: the one rule by which a user's name for a step (its step name, node id, class
name or label) finds it, for every setting that names steps (streaming segments, checks,
external deps, GPUs, ``STEP.PARAM``)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Sequence, Tuple


def step_refs_of(node: Any, step: str) -> Tuple[str, ...]:
    """What a user may call a step by: its step name, node id, class name and label."""
    return tuple(r for r in (step, node.id, node.name, node.label) if r)


def resolve_refs(items: Iterable[Tuple[Sequence[str], Any]]) -> Dict[str, Any]:
    """``(refs, value)`` pairs -> ref -> value; a step name (first ref) wins over the others."""
    items = list(items)
    refs: Dict[str, Any] = {}
    for names, value in items:
        for ref in names[1:]:
            if ref:
                refs.setdefault(ref, value)
    refs.update({names[0]: value for names, value in items})
    return refs
