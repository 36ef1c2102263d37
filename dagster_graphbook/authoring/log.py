"""`log()`: Graphbook's logging call, routed to the Dagster event log of the running step."""

from __future__ import annotations

import contextlib
import contextvars
import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal

LogType = Literal["info", "error", "json", "image"]
Emit = Callable[[str, str], None]  # (level, message): where a step's lines go


@dataclass(frozen=True)
class LogTarget:
    """Where a step's log lines go: ``emit(level, message)`` plus the node it speaks for."""

    node_id: str
    node_name: str
    emit: Emit


_current: contextvars.ContextVar[LogTarget | None] = contextvars.ContextVar(
    "graphbook_log_target", default=None
)


@contextlib.contextmanager
def log_target(target: LogTarget) -> Iterator[None]:
    """Make `log()` write to `target` while a step runs."""
    token = _current.set(target)
    try:
        yield
    finally:
        _current.reset(token)


def log_to_stderr(node_id: str, node_name: str) -> None:
    """For the rest of this worker process, `log()` writes to stderr (see ``stderr_target``)."""
    _current.set(stderr_target(node_id, node_name))


def stderr_target(node_id: str, node_name: str) -> LogTarget:
    """Target for worker processes: they must not write to the run's event log directly."""

    def emit(level: str, message: str) -> None:
        print(
            f"[{node_id} {node_name}] {'[ERR] ' if level == 'error' else ''}{message}",
            file=sys.stderr,
            flush=True,
        )

    return LogTarget(node_id, node_name, emit)


def transform_json_log(obj: Any) -> Any:
    """Make a value JSON-friendly the way Graphbook's json logs do (tensors and images
    summarised)."""
    if isinstance(obj, dict):
        return {str(k): transform_json_log(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [transform_json_log(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, bytes):
        return f"(bytes of length {len(obj)})"
    shape = getattr(obj, "shape", None)
    if shape is not None and type(obj).__name__ == "Tensor":
        return f"(Tensor of shape {tuple(shape)})"
    size = getattr(obj, "size", None)
    if type(obj).__module__.startswith("PIL.") and isinstance(size, tuple):
        return f"(PIL Image of size {size})"
    return str(obj)


def log(msg: Any, type: LogType = "info") -> None:
    """Log from inside a step (Graphbook's ``graphbook.log`` / ``ctx.log``)."""
    target = _current.get()
    if target is None:
        raise ValueError("Can't find node info. Only steps running in a workflow can log.")
    if type == "info":
        target.emit("info", str(msg))
    elif type == "error":
        target.emit("error", str(msg))
    elif type == "json":
        target.emit("info", json.dumps(transform_json_log(msg)))
    elif type == "image":
        value = msg.get("value") if isinstance(msg, dict) else msg
        target.emit("info", f"image: {transform_json_log(value)}")
    else:
        raise ValueError(f"Unknown log type {type!r}: use info, error, json or image")


# graphbook.logging's DAG log files and their viewer (examples/logging_example.py): not provided.
_DAG_LOG_NAMES = frozenset(
    {"CallableNode", "DAGLogger", "DAGNodeRef", "LogDirectoryReader", "LogManager", "LogWriter"}
)


class TransformsLogger:
    """``graphbook.logging.torch.TransformsLogger``: importable, so node files that import it load;
    making one fails saying why (Graphbook writes each transform's output image to a DAG log file
    for its own log viewer, which does not exist here)."""

    def __init__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError(
            f"graphbook.logging.torch.{type(self).__name__} (Graphbook's DAG log of each "
            "torchvision transform's output images, for Graphbook's log viewer) is not supported "
            "by dagster-graphbook: there is no such viewer here. Apply the transforms without it "
            "(drop the logger.log(transforms) wrapping); to look at transformed images, write "
            "them to files from a step, e.g. a BatchStep's dump_fn "
            "(docs/graphbook-differences.md)"
        )


class TensorDAGNodeRef(TransformsLogger):
    """``graphbook.logging.torch.TensorDAGNodeRef``, a node of a TransformsLogger: not supported."""


def __getattr__(name: str) -> Any:
    """``from graphbook.logging import DAGLogger`` says it is not supported, not just missing."""
    if name in _DAG_LOG_NAMES:
        raise ImportError(
            f"graphbook.logging.{name} (Graphbook's DAG log files and their viewer) is not "
            "supported by dagster-graphbook: a step's log() goes to the Dagster event log "
            "(docs/graphbook-differences.md)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
