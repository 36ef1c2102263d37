"""Graphbook's step classes (``graphbook.steps``): same attributes, hooks and call order.

The drivers in ``dagster_graphbook.execution`` run these; a step only declares what it does.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import warnings
from typing import IO, Any, Dict, Generator, List, Optional, Tuple, Union

from ._tempfiles import own_prefix, sweep_local_temporaries
from .log import LogType, log
from .utils import transform_function_string

StepOutput = Dict[str, List[Any]]
"""Pin name -> list of notes."""

__all__ = [
    "StepOutput",
    "Step",
    "SourceStep",
    "GeneratorSourceStep",
    "AsyncStep",
    "BatchStep",
    "PromptStep",
    "Split",
    "SplitByItems",
    "SplitItemField",
    "Copy",
    "LoadJSONL",
    "DumpJSONL",
    "log",
]


def route_to_output(out: Union[str, StepOutput, None], data: Any) -> StepOutput:
    """Turn what ``route()`` returned into a StepOutput (None drops the note, as in Graphbook)."""
    if isinstance(out, str):
        return {out: [data]}
    if isinstance(out, dict):
        return {pin: value if isinstance(value, list) else [value] for pin, value in out.items()}
    return {}


class Step:
    """A workflow node that turns each input note into notes on its output pins."""

    RequiresInput = True
    Parameters: Dict[str, dict] = {}
    Outputs: List[str] = ["out"]
    Category = ""

    def __init__(self, item_key: Optional[str] = None):
        self.id = None
        self.item_key = item_key

    def set_context(self, **context: Any) -> None:
        for key, value in context.items():
            setattr(self, key, value)

    def log(self, message: Any, type: LogType = "info") -> None:
        log(message, type)

    def on_start(self) -> None:
        """Called once per run, before the first note."""

    def on_end(self) -> None:
        """Called once per run after the last note, also when the run failed."""

    def on_clear(self) -> None:
        """Graphbook's "clear outputs"; never called under Dagster (runs start fresh)."""

    def on_data(self, data: Any) -> None:
        """Called first for every note."""

    def on_item(self, item: Any, data: Any) -> None:
        """Called with ``data[item_key]`` (the whole value) when ``item_key`` is set."""

    def on_after_item(self, data: Any) -> None:
        """Called after ``on_item``, before ``route``."""

    def forward_note(self, data: Any) -> Union[str, StepOutput, None]:
        warnings.warn("forward_note is deprecated, use route", DeprecationWarning, stacklevel=2)
        return self.route(data)

    def route(self, data: Any) -> Union[str, StepOutput, None]:
        """Pick the output pin (or return a StepOutput); None drops the note."""
        return "out"

    def __call__(self, data: Any) -> StepOutput:
        self.on_data(data)
        if self.item_key is not None:
            if getattr(data, "get", None) is None:
                raise TypeError(f"item_key is only for dict-like notes, got {type(data).__name__}")
            item = data.get(self.item_key, None)
            if item is None:
                raise KeyError(f"item key {self.item_key!r} not found in note")
            self.on_item(item, data)
        self.on_after_item(data)
        return route_to_output(self.route(data), data)

    def all(self, data: List[Any]) -> StepOutput:
        out: StepOutput = {}
        for d in data or []:
            for pin, notes in self(d).items():
                out.setdefault(pin, []).extend(notes)
        return out


class SourceStep(Step):
    """A step with no input whose ``load()`` returns all of its notes at once."""

    RequiresInput = False

    def __init__(self):
        super().__init__()

    def load(self) -> StepOutput:
        raise NotImplementedError("load must be implemented for a SourceStep")

    # Graphbook's API: a source is called with no note (Liskov does not hold, on purpose)
    def __call__(self) -> StepOutput:  # type: ignore[override]
        result = self.load()
        return {
            pin: value if isinstance(value, list) else [value]
            for pin, value in (result or {}).items()
        }


class GeneratorSourceStep(SourceStep):
    """A source whose ``load()`` is a generator: each yield is ``{pin: note(s)}``, a list or a
    note."""

    def __init__(self):
        super().__init__()
        self.generator = self.load()

    # Graphbook's API: this source's load() is a generator, not a StepOutput
    def load(self) -> Generator[Any, None, None]:  # type: ignore[override]
        raise NotImplementedError("load must be implemented for a GeneratorSourceStep")

    def on_clear(self) -> None:
        self.generator = self.load()

    def __call__(self) -> Any:  # type: ignore[override]  # no note, as SourceStep.__call__
        try:
            return next(self.generator)
        except StopIteration:
            return {}


class AsyncStep(Step):
    """Graphbook's base for steps that hold notes back (batch and prompt steps).

    A workflow step subclassing it directly fails to load (``workflow.UNSUPPORTED_KINDS``): its
    queues are drained by Graphbook's own processor loop, not by a Dagster op.
    """

    def __init__(self, item_key: Optional[str] = None):
        super().__init__(item_key)
        self._in_queue: List[Any] = []
        self._out_queue: List[Any] = []

    def in_q(self, data: Any) -> None:
        if data is not None:
            self._in_queue.append(data)

    def is_active(self) -> bool:
        return bool(self._in_queue)


class BatchStep(AsyncStep):
    """Batches the items under ``item_key`` of all input notes.

    ``load_fn`` runs per item in the loader pool, ``on_item_batch(outputs, items, notes)`` per batch
    in the step process, ``dump_fn(*tuple)`` per returned tuple in the dump pool. A note leaves
    (``on_after_item`` then ``route``) once all its items were processed and dumped.
    """

    def __init__(self, batch_size: int = 8, item_key: str = ""):
        super().__init__(item_key=item_key)
        self.batch_size = int(batch_size)
        self.load_fn_params: Dict[str, Any] = {}
        self.dump_fn_params: Dict[str, Any] = {}

    @staticmethod
    def load_fn(**args: Any) -> Any:
        raise NotImplementedError("load_fn must be implemented to load items in the worker pool")

    @staticmethod
    def dump_fn(**args: Any) -> Any:
        raise NotImplementedError(
            "dump_fn must be implemented when on_item_batch returns dump tuples"
        )

    def on_item_batch(
        self, outputs: Optional[List[Any]], items: List[Any], data: List[Any]
    ) -> Optional[List[Tuple[Any, ...]]]:
        """Process one batch; return one dump_fn argument tuple per item, or None."""
        return None


class PromptStep(AsyncStep):
    """Human-in-the-loop step. Not supported under Dagster: loading a workflow with one fails,
    saying why (``workflow.UNSUPPORTED_KINDS``)."""

    def get_prompt(self, data: Any) -> Optional[dict]:
        return None

    def on_prompt_response(self, data: Any, response: Any) -> None:
        raise NotImplementedError


class Split(Step):
    """Routes a note to A when ``split_fn(note)`` is truthy, else to B."""

    RequiresInput = True
    Parameters = {"split_fn": {"type": "resource"}}
    Outputs = ["A", "B"]
    Category = "Filtering"

    def __init__(self, split_fn: Any):
        super().__init__()
        self.split_fn = split_fn
        self.fn = transform_function_string(split_fn)

    def route(self, data: Any) -> str:
        return "A" if self.fn(data) else "B"


class SplitByItems(Step):
    """Routes a note to A when ``split_items_fn(items=note[item_key], data=note)`` is truthy, else
    to B.

    Graphbook 0.13.3 reads ``data.items[item_key]`` (a leftover of its ``Note`` class), which fails
    on every dict note; this reads ``data[item_key]``, as its Note-era version did.
    """

    RequiresInput = True
    Parameters = {
        "split_items_fn": {"type": "resource", "required": True},
        "item_key": {"type": "string", "required": True},
    }
    Outputs = ["A", "B"]
    Category = "Filtering"

    def __init__(self, split_items_fn: Any, item_key: str):
        super().__init__(item_key=item_key)
        self.split_fn = split_items_fn
        self.fn = transform_function_string(split_items_fn)

    def route(self, data: Any) -> str:
        return "A" if self.fn(items=data[self.item_key], data=data) else "B"


class SplitItemField(Step):
    """Moves the items under ``item_key`` to ``a_key`` (``split_fn(item=item)`` truthy) or
    ``b_key``, deleting ``item_key`` unless ``should_delete_original`` is false; the note goes on
    to ``out``.

    As in Graphbook (where 0.13.3 fails on ``data.items[item_key]``, see ``SplitByItems``), except
    that ``a_key``, ``b_key`` and ``should_delete_original`` are declared parameters: Graphbook
    declares only ``split_fn`` and ``item_key``, so its editor cannot set the keys it requires.
    """

    RequiresInput = True
    Parameters = {
        "split_fn": {"type": "resource", "required": True},
        "item_key": {"type": "string", "required": True},
        "a_key": {
            "type": "string",
            "required": True,
            "description": "Key for items split_fn keeps",
        },
        "b_key": {"type": "string", "required": True, "description": "Key for the other items"},
        "should_delete_original": {
            "type": "boolean",
            "default": True,
            "description": "Delete item_key from the note",
        },
    }
    Outputs = ["out"]
    Category = "Filtering"

    def __init__(
        self,
        split_fn: Any,
        item_key: str,
        a_key: str,
        b_key: str,
        should_delete_original: bool = True,
    ):
        super().__init__(item_key=item_key)
        self.split_fn = split_fn
        self.fn = transform_function_string(split_fn)
        self.a_key = a_key
        self.b_key = b_key
        self.should_delete_original = should_delete_original

    def on_after_item(self, data: Any) -> None:
        a_items: List[Any] = []
        b_items: List[Any] = []
        for item in data[self.item_key]:
            (a_items if self.fn(item=item) else b_items).append(item)
        data[self.a_key] = a_items
        data[self.b_key] = b_items
        if self.should_delete_original:
            del data[self.item_key]


class Copy(Step):
    """Sends the note to A and a deep copy of it to B."""

    RequiresInput = True
    Parameters: Dict[str, dict] = {}
    Outputs = ["A", "B"]
    Category = "Util"

    def __init__(self):
        super().__init__()

    def route(self, data: Any) -> StepOutput:
        return {"A": [data], "B": [copy.deepcopy(data)]}


class LoadJSONL(SourceStep):
    """Reads a JSON-lines file into one note per line."""

    RequiresInput = False
    Parameters = {
        "jsonl_path": {
            "type": "resource",
            "description": "Path of the .jsonl file (bind a Text resource)",
        },
        "start_from": {"type": "number", "default": 0, "description": "Lines to skip"},
    }
    Outputs = ["out"]
    Category = "IO"

    def __init__(self, jsonl_path: str, start_from: int = 0):
        super().__init__()
        self.jsonl_path = jsonl_path
        self.start_from = int(start_from or 0)

    def load(self) -> StepOutput:
        with open(self.jsonl_path, encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
        return {"out": [json.loads(line) for line in lines[self.start_from :]]}


class DumpJSONL(Step):
    """Writes each note as a JSON line.

    Unlike Graphbook (which appends forever), a run writes a temporary file and renames it over
    ``jsonl_path`` in ``on_end``: a retried or re-run step never duplicates lines, and a failed
    run (``run_failed``, set by the driver) leaves the previous file as it was.
    """

    RequiresInput = True
    Parameters = {
        "jsonl_path": {
            "type": "resource",
            "description": "Path of the .jsonl file (bind a Text resource)",
        }
    }
    Outputs = ["out"]
    Category = "IO"

    def __init__(self, jsonl_path: str):
        super().__init__()
        self.jsonl_path = jsonl_path
        self._file: Optional[IO[str]] = None

    def on_start(self) -> None:
        folder = os.path.dirname(os.path.abspath(self.jsonl_path))
        os.makedirs(folder, exist_ok=True)
        sweep_local_temporaries(folder)  # what a killed run (kill -9) left here
        # the pid in the name lets that sweep tell a dead writer's file from a live one's
        fd, self._tmp = tempfile.mkstemp(dir=folder, prefix=own_prefix(), suffix=".jsonl")
        self._file = os.fdopen(fd, "w", encoding="utf-8")

    def on_after_item(self, data: Any) -> None:
        assert self._file is not None, "on_start opens the file"
        self._file.write(json.dumps(data) + "\n")

    def on_end(self) -> None:
        if self._file is None:
            return
        file, self._file = self._file, None
        try:
            file.close()  # flushes: a full disk fails here
            if not getattr(self, "run_failed", False):
                os.replace(self._tmp, self.jsonl_path)
        finally:
            if os.path.exists(self._tmp):  # failed or not committed: never left on the disk
                os.unlink(self._tmp)
