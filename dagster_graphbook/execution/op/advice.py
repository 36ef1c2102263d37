"""In the default mode, a warning when a stored pin carries many tensor bytes: streaming would not
store them at all (the Batch Data guide's tensors-in-notes pattern)."""

from __future__ import annotations

import os
from typing import Any, Iterator

from ...errors import Label
from ...store.codec import tensor_bytes

WARN_ENV = "DAGSTER_GRAPHBOOK_TENSOR_WARN_MB"
DEFAULT_WARN_MB = 256.0


def warn_limit_bytes() -> int:
    """The set size: ``$DAGSTER_GRAPHBOOK_TENSOR_WARN_MB`` megabytes (default 256; 0: off)."""
    return int(float(os.environ.get(WARN_ENV, DEFAULT_WARN_MB)) * 1_000_000)


def warn_heavy_outputs(context: Any, label: Label, outputs: Iterator[Any]) -> Iterator[Any]:
    """Pass ``outputs`` on; warn for each whose notes hold more tensor bytes than the set size."""
    limit = warn_limit_bytes()
    for output in outputs:
        if limit > 0 and isinstance(output.value, list):
            size = tensor_bytes(output.value, limit)
            if size > limit:
                context.log.warning(
                    f"{label}: the notes of pin '{output.output_name}' hold more than "
                    f"{limit / 1e6:.0f} MB of tensors, which are stored between steps; "
                    f"run the workflow with streaming=True "
                    f"(YAML 'streaming: true', CLI --streaming) to pass them step to step without "
                    f"storing them, or drop them from the notes (${WARN_ENV} sets this limit)"
                )
        yield output
