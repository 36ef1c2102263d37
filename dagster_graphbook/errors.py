"""Errors that are Dagster failures, so a failed run's headline is our message.

An op that raises a ``dg.Failure`` fails with the failure's ``description`` as its headline (the
UI shows it instead of Dagster's "Error occurred while executing op ...") and its ``metadata``
as entries below it, as dagster-dbt's errors do.

``GraphbookError`` is the one base of every error a user can meet: ``WorkflowError`` (a workflow
that cannot run), ``RequestError`` (a run asked for with what it cannot take), ``StepFailure``
(a step that failed on an item) and the others derive from it, so ``except GraphbookError``
catches them all. Where a builtin base was part of an error's contract before, it stays a second
base (``RequestError`` and ``WorkflowError`` are ``ValueError``s, ``StepFailure`` a
``RuntimeError``). ``tests/test_errors.py`` checks every exception class of the package.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional, Set, Tuple, Type, Union

import dagster as dg

NOTE_PREVIEW_CHARS = 500
TRACEBACK_TAIL_LINES = 15


@dataclass(frozen=True)
class StepRef:
    """Which step (or resource) of which workflow: what errors, warnings and progress lines name.

    ``str()`` is the label users read; errors keep the three fields apart for the run's metadata.
    """

    workflow: str
    step: str
    node: str
    kind: str = "step"  # step | resource

    def __str__(self) -> str:
        return f"workflow '{self.workflow}', {self.kind} '{self.step}' (node {self.node})"


Label = Union[StepRef, str]  # a free-form label names no workflow: tests, benchmarks


class GraphbookError(dg.Failure):
    """A dagster-graphbook error: ``description`` is the headline, ``metadata`` what it concerns.

    ``str(error)`` is the headline followed by any detail (a traceback), as before.
    """

    def __init__(
        self,
        description: str,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        detail: str = "",
        allow_retries: bool = True,
    ):
        super().__init__(description=description, metadata=metadata, allow_retries=allow_retries)
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.description}\n\n{self.detail}" if self.detail else str(self.description)

    def __reduce__(self) -> Any:
        # Exception pickles as cls(*args), which our signatures do not take: restore the state
        return (_restore, (type(self), str(self.description), self.__dict__.copy()))


class RequestError(GraphbookError, ValueError):
    """A run asked for with what the workflow cannot take (a ``--set`` value that cannot be
    read, a partition key of a workflow without partitions): refused in one line before any run
    starts. Still a ``ValueError``, as before it was a ``GraphbookError``."""


def _restore(cls: Type[GraphbookError], description: str, state: Dict[str, Any]) -> GraphbookError:
    error = cls.__new__(cls)
    Exception.__init__(error, description)
    error.__dict__.update(state)
    return error


def note_preview(note: Any, limit: int = NOTE_PREVIEW_CHARS) -> str:
    """The note as JSON (values JSON cannot hold as their repr), cut to ``limit`` characters."""
    try:
        data = dict(note) if isinstance(note, Mapping) else note
        text = json.dumps(data, default=lambda value: _cut(repr(value), 80), ensure_ascii=False)
    except Exception:  # a note JSON cannot walk (a cycle, a failing __repr__): its repr
        try:
            text = repr(note)
        except Exception as exc:
            text = f"<note whose repr fails: {type(exc).__name__}>"
    return _cut(text, limit)


def quoted(value: Any, limit: int = 60, head: int = 40) -> str:
    """``value`` as an error quotes user input: its repr when short, else the repr of its first
    ``head`` characters and its length (a value may be megabytes)."""
    if not isinstance(value, str) or len(value) <= limit:
        return repr(value)
    return f"{value[:head]!r}... ({len(value)} characters)"


def traceback_tail(text: str, lines: int = TRACEBACK_TAIL_LINES) -> str:
    """The last ``lines`` lines of a traceback: where it was raised and the error."""
    kept = text.strip().splitlines()
    return "\n".join((["..."] if len(kept) > lines else []) + kept[-lines:])


def exception_line(text: str) -> str:
    """The last line of a traceback (``ValueError: cannot handle 3``), or ``""``."""
    kept = text.strip().splitlines()
    return kept[-1].strip() if kept else ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class StoredNotesError(GraphbookError):
    """Stored notes a step needs are gone or unreadable; names the asset, partition, the run that
    wrote them and the file, and says how to get them back."""

    def __init__(
        self,
        headline: str,
        *,
        asset: str,
        partition: Optional[str],
        run_id: Optional[str],
        path: str,
    ):
        metadata = {"asset": asset, "partition": partition or "", "run": run_id or "", "file": path}
        super().__init__(headline, metadata=metadata)


class RayHeadLostError(GraphbookError):
    """The Ray head a run's steps run on did not answer for longer than the Ray executor waits
    (``head_lost_timeout_s``); names its address, the step and how to resume once it is back."""

    def __init__(self, headline: str, *, address: str, step: str, run_id: str, silent_s: float):
        metadata = {"address": address, "step": step, "run": run_id, "silent_s": round(silent_s)}
        super().__init__(headline, metadata=metadata)


def error_chain(exc: BaseException, *, implicit: bool = True) -> Iterator[BaseException]:
    """``exc``, then the errors it was raised from (``__cause__``) and, with ``implicit``, while
    handling (``__context__``), nearest first; at most 20, never round a loop."""
    seen: Optional[BaseException] = exc
    met: Set[int] = set()
    while seen is not None and id(seen) not in met and len(met) < 20:
        met.add(id(seen))
        yield seen
        seen = seen.__cause__ or (seen.__context__ if implicit else None)


def error_cause(
    exc: BaseException, kinds: Union[type, Tuple[type, ...]], *, implicit: bool = True
) -> Optional[BaseException]:
    """``exc`` or the first error of its chain (``error_chain``) that is one of ``kinds``."""
    return next((e for e in error_chain(exc, implicit=implicit) if isinstance(e, kinds)), None)
