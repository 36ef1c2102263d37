"""Errors and error records of step runs, each naming the workflow, the step and the item."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional


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


@dataclass(frozen=True)
class ItemError:
    """One note or item that failed, kept when ``on_item_error: skip`` lets the run go on."""

    stage: str  # on_data, load_fn, on_item_batch, dump_fn, step, route
    note_index: int
    item_index: Optional[int]
    item: str
    note: str
    error: str  # the traceback

    def as_record(self) -> Dict[str, Any]:
        return asdict(self)

    def headline(self) -> str:
        where = f"note {self.note_index}" + (
            f", item {self.item_index} {self.item}" if self.item_index is not None else ""
        )
        last = self.error.strip().splitlines()[-1] if self.error.strip() else "error"
        return f"{self.stage} failed on {where}: {last}"


class StepFailure(RuntimeError):
    """A step failed; the message names workflow, step and item, and carries the traceback."""

    def __init__(self, label: str, message: str, error: Optional[ItemError] = None):
        self.label = label
        self.error = error
        detail = f"\n\n{error.error}" if error is not None and error.error else ""
        super().__init__(f"{label}: {message}{detail}")
