"""Errors and error records of step runs, each naming the workflow, the step and the item."""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import dagster as dg

from ..errors import GraphbookError, Label, StepRef, exception_line, note_preview, traceback_tail
from ..store.previews import is_picture

_NO_NOTE = object()


def short_repr(obj: Any, limit: int = 200) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def exit_hint(exc: BaseException, where: str) -> str:
    """A line after the traceback when user code called ``sys.exit()`` instead of raising."""
    if not isinstance(exc, SystemExit):
        return ""
    return (
        f"{where} called sys.exit({exc.code!r}) (SystemExit): treated as this item's error; "
        "raise an exception instead\n"
    )


def named_url(exc: BaseException) -> str:
    """`` (at s3://bucket/key)``: the URL a failed filesystem call was on, when ``exc`` does not
    name it (s3fs's error for wrong credentials says only ``The AWS Access Key Id you provided
    does not exist in our records``; a missing bucket's names the key), else ``""``. Read from
    the traceback: the innermost frame of an fsspec filesystem's method with a ``path``."""
    spec = sys.modules.get("fsspec.spec")  # no fsspec imported: no bucket call failed
    if spec is None:
        return ""
    found: Optional[Tuple[Any, str]] = None
    tb = exc.__traceback__
    while tb is not None:  # outermost first: the innermost call on a path wins
        local = tb.tb_frame.f_locals
        fs, path = local.get("self"), local.get("path", local.get("rpath"))
        if isinstance(fs, spec.AbstractFileSystem) and isinstance(path, str) and path:
            found = (fs, path)
        tb = tb.tb_next
    if found is None:
        return ""
    fs, path = found
    try:
        url = fs.unstrip_protocol(path)
    except Exception:  # noqa: BLE001 - a driver's own spelling: the path as it is
        url = path
    said = str(exc)
    return "" if path.strip("/") in said or url in said else f" (at {url})"


def url_named(text: str, exc: BaseException) -> str:
    """A traceback's ``text`` whose last line (the error) ends naming the URL (``named_url``)."""
    hint = named_url(exc)
    if not hint:
        return text
    body = text.rstrip("\n")
    return f"{body}{hint}\n"


CUDA_FORK_HINT = (
    "load_fn and dump_fn run in forked workers and must not use CUDA; move GPU work into "
    "on_item_batch"
)


def cuda_fork_hint(exc: BaseException) -> str:
    """A line after a worker's traceback when ``exc`` is CUDA refusing to start in this forked
    worker (its parent had started CUDA). Called in the worker, where the fork is known."""
    if "torch" not in sys.modules:  # no torch imported: CUDA was not what failed
        return ""
    from .pools.torch_internals import is_cuda_in_bad_fork_error

    return f"\nHint: {CUDA_FORK_HINT}\n" if is_cuda_in_bad_fork_error(exc) else ""


@dataclass(frozen=True)
class ItemError:
    """One note or item that failed, kept when ``on_item_error: skip`` lets the run go on."""

    stage: str  # on_data, load_fn, on_item_batch, dump_fn, step, route
    note_index: int
    item_index: Optional[int]
    item: str
    note: str
    error: str  # the traceback
    # the item as the UI shows it: a thumbnail (markdown) or why it is no image (store/previews)
    picture: str = ""

    def headline(self) -> str:
        where = f"note {self.note_index}" + (
            f", item {self.item_index} {self.item}" if self.item_index is not None else ""
        )
        last = self.error.strip().splitlines()[-1] if self.error.strip() else "error"
        return f"{self.stage} failed on {where}: {last}"


def skip_hint(label: Label, *, batch: bool) -> str:
    """What a note or item failure under ``on_item_error: raise`` (the default) adds to its
    headline: that ``skip`` exists (and, for a batch step, ``max_skipped_fraction``) and where
    to set it."""
    bound = ", with runtime.max_skipped_fraction as the largest share to lose" if batch else ""
    where = "in the Launchpad in the step op's config"
    if isinstance(label, StepRef):
        where += f", or --set {label.step}.runtime.on_item_error=skip"
    what = "items" if batch else "notes"
    return f"to record failed {what} and go on instead: runtime.on_item_error: skip{bound}; {where}"


class StepFailure(GraphbookError, RuntimeError):
    """A step failed: the headline names the workflow, the step, the item and the error; the
    metadata holds each apart, with the note's JSON preview and the traceback's tail.

    Still a ``RuntimeError``, as before it became a ``dg.Failure``; ``str()`` adds the traceback.
    """

    def __init__(
        self,
        label: Label,
        message: str,
        error: Optional[ItemError] = None,
        *,
        note: Any = _NO_NOTE,
        allow_retries: bool = True,
        hint: str = "",
    ):
        self.label, self.ref, self.message, self.error = str(label), label, message, error
        ref = label if isinstance(label, StepRef) else None
        self.where: Tuple[Optional[str], ...] = (
            (ref.workflow, ref.step, ref.node) if ref else (None, None, None)
        )
        self.note = None if note is _NO_NOTE else note_preview(note)
        headline = f"{label}: {message}"
        last = exception_line(error.error) if error is not None else ""
        if last and last not in headline:
            headline += f": {last}"
        if hint:  # after the error, so the headline still reads step: what failed: why
            headline += f" ({hint})"
        detail = error.error.strip() if error is not None and error.error else ""
        super().__init__(headline, detail=detail, allow_retries=allow_retries)

    @property
    def metadata(self) -> Mapping[str, dg.MetadataValue]:
        """What failed, read when Dagster records the failure (after ``raise ... from``).

        Every entry but the item's picture is text, the indexes too, as the headline says them:
        a client reading the entries' text (GraphQL's ``TextMetadataEntry``) read the two int
        entries as None."""
        workflow, step, node = self.where
        entries: Dict[str, Any] = {"workflow": workflow, "step": step, "node": node}
        error = self.error
        if error is not None:
            entries["stage"] = error.stage
            if error.note_index >= 0:
                entries["note_index"] = error.note_index
            if error.item_index is not None:
                entries["item_index"] = error.item_index
                entries["item"] = error.item
            if error.picture:  # a thumbnail (markdown), or why the item does not open (text)
                entries["item_preview"] = (
                    dg.MetadataValue.md(error.picture)
                    if is_picture(error.picture)
                    else dg.MetadataValue.text(error.picture)
                )
        entries["note"] = self.note or (error.note if error is not None else None)
        entries["exception"] = self._exception_type()
        if error is not None and error.error.strip():
            entries["traceback"] = traceback_tail(error.error)
        return {
            k: v if isinstance(v, dg.MetadataValue) else dg.MetadataValue.text(str(v))
            for k, v in entries.items()
            if v not in (None, "")
        }

    @metadata.setter
    def metadata(self, value: Any) -> None:  # dg.Failure.__init__ sets it; ours is computed
        pass

    def _exception_type(self) -> Optional[str]:
        last = exception_line(self.error.error) if self.error is not None else ""
        name = last.split(":", 1)[0].strip()
        if name and all(part.isidentifier() for part in name.split(".")):
            return name
        cause = self.__cause__
        return type(cause).__name__ if cause is not None else None


def skip_or_raise(
    skip: bool,
    errors: List[ItemError],
    label: Label,
    message: str,
    error: ItemError,
    *,
    note: Any,
    batch: bool,
    cause: Optional[BaseException] = None,
) -> None:
    """A note or item failed: under ``on_item_error: skip`` record ``error`` in ``errors`` and go
    on; under ``raise`` (the default) fail the step with ``message``, naming the note, and the
    hint that ``skip`` exists (``skip_hint``). ``cause``: the exception it is raised from."""
    if skip:
        errors.append(error)
        return
    failure = StepFailure(label, message, error, note=note, hint=skip_hint(label, batch=batch))
    if cause is None:
        raise failure
    raise failure from cause


def killed_by_signal(exitcode: Optional[int]) -> bool:
    """A process's negative exit code: the signal that killed it."""
    return exitcode is not None and exitcode < 0


def exit_status(exitcode: Optional[int]) -> str:
    """How a worker process ended, from its ``exitcode`` (negative: the signal that killed it)."""
    if exitcode is None:
        return "ended"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class WorkerDied(StepFailure):
    """A loader or dump worker process died (killed by a signal: out of memory, segfault, kill;
    or exited) while the step waited for it. Raised by the pool that owns the worker, where the
    death is seen (as torch's DataLoader does); the step fails with it, naming the pids.

    ``pids``: the dead workers' process ids; ``stage``: ``"load_fn"`` or ``"dump_fn"``.
    """

    def __init__(self, label: Label, message: str, *, pids: Sequence[int], stage: str):
        self.pids: Tuple[int, ...] = tuple(pids)
        self.stage = stage
        super().__init__(label, message)

    @staticmethod
    def how(dead: Sequence[Tuple[int, Optional[int]]]) -> str:
        """Why such workers end, for the message: a signal's usual causes when one was killed,
        else what makes a worker exit by itself."""
        if any(killed_by_signal(code) for _, code in dead):
            return "killed by a signal: out of memory, segfault or kill"
        return "it exited: os._exit or a C library's exit(), or a failure at start-up (its stderr)"

    @staticmethod
    def describe(dead: Sequence[Tuple[int, Optional[int]]]) -> str:
        """``pid 123 killed by SIGKILL, pid 124 exited with code 1`` for (pid, exitcode) pairs."""
        return ", ".join(f"pid {pid} {exit_status(code)}" for pid, code in dead)


class GpuOutOfMemory(StepFailure):
    """CUDA ran out of memory in ``on_item_batch``. The step fails at once, under
    ``on_item_error: skip`` too and without ``runtime.retries``: every later batch of that size
    would fail alike, and skipping them all would lose the day. The batch is not halved and
    retried: ``on_item_batch`` may have changed the step's state (counters, notes) before it
    failed."""

    def __init__(
        self,
        label: Label,
        *,
        items: int,
        batch_size: int,
        device: str,
        memory: str,
        where: str = "on_item_batch",
    ):
        self.items, self.batch_size, self.device = items, batch_size, device
        super().__init__(
            label,
            f"CUDA ran out of memory in {where} on a batch of {items} items (batch_size "
            f"{batch_size}, device {device}{'; ' + memory if memory else ''})",
            hint=f"lower batch_size{_set_hint(label, 'batch_size', max(1, batch_size // 2))}, "
            "or free the GPU of other processes",
            allow_retries=False,  # a retry runs the same batch size into the same wall
        )


def _set_hint(label: Label, param: str, value: Any) -> str:
    """`` (--set STEP.PARAM=VALUE, or in the Launchpad)`` for a step's parameter."""
    if isinstance(label, StepRef):
        return f" (--set {label.step}.{param}={value}, or the step's config in the Launchpad)"
    return " (the step's parameter)"
