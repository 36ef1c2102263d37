"""The trust rule, at run time: run config may not replace code, and a partition key must be
one of the job's and safe in a path (what is code is decided at definition time: ``trust``)."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, Optional

from ...errors import Label, quoted
from ..errors import StepFailure

# A partition key is substituted into paths and names files:
# no separators, '..', braces, control characters or unpaired surrogates (no file name holds one).
_UNSAFE_KEY = re.compile(r"[/\\{}\x00-\x1f\x7f\ud800-\udfff]|\.\.|^[.\s]|\s$")
# It is also a folder of the notes store (``<base>/<asset>/<partition>/<run id>.pkl``): a file
# or folder name holds at most 255 bytes (NAME_MAX on Linux).
MAX_KEY_BYTES = 255


def check_code_config(
    config: Dict[str, Any],
    locked: Dict[str, Any],
    overridable: Iterable[str],
    label: Label,
    why: Optional[Dict[str, str]] = None,
) -> None:
    """Refuse run config that changes a locked (code) parameter, naming the step or resource."""
    hint = "('\"overridable\": true' in its entry, or node.param(key, value, overridable=True))"
    for key, value in config.items():
        if key not in locked or value == locked[key] or key in overridable:
            continue
        if why and key in why:
            raise StepFailure(
                label,
                f"run config changes parameter {key!r}, but {why[key]}; only the workflow may "
                "set it unless the workflow marks the consuming function parameter overridable "
                f"{hint}",
            )
        raise StepFailure(
            label,
            f"run config replaces the code of function parameter {key!r}, which the workflow "
            "does not mark overridable; function parameters run code, so only the workflow may "
            f"set them unless it marks the parameter {hint}",
        )


def check_partition_key(key: str, partitions_def: Any, instance: Any, label: Label) -> str:
    """``key`` if it is one of the job's partitions and safe in a path; else a clear refusal."""
    if not isinstance(key, str) or not key or _UNSAFE_KEY.search(key):
        raise StepFailure(
            label,
            f"partition key {quoted(key)} refused: it is substituted into paths, so it may not "
            "hold '/', '\\', '..', braces, control characters or unpaired surrogates, nor start "
            "with '.'",
        )
    size = len(key.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise StepFailure(
            label,
            f"partition key {quoted(key)} ({size} bytes) refused: it names a folder of the "
            f"notes store, and a folder name is at most {MAX_KEY_BYTES} bytes of UTF-8 "
            "(NAME_MAX on Linux): use a shorter key",
        )
    if partitions_def is None:
        raise StepFailure(label, f"partition key {quoted(key)} refused: the job is not partitioned")
    try:
        known = partitions_def.has_partition_key(key, dynamic_partitions_store=instance)
    except TypeError:
        known = key in partitions_def.get_partition_keys(dynamic_partitions_store=instance)
    if not known:
        raise StepFailure(
            label, f"partition key {quoted(key)} refused: it is not a partition of the job"
        )
    return key
