"""What a step's materializations carry: the figures a user reads and plots, and nothing else.

Dagster's Plots tab draws every numeric entry of a materialization across runs, so an entry is
numeric only when its curve means something (seconds, items/s, input notes, errors, the step's
own figures such as accuracy). Counts of the whole step that would contradict a pin's own count
(``notes_out``, ``notes``) are left out: a pin's count is its ``dagster/row_count``, set by the
IO manager. Run settings and other per-run facts (device, workers, batches) go into ONE JSON
entry, ``details``; the step's constants are on the definition (``graphbook``, see node_info).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import dagster as dg

from ...store.previews import PICTURES_SHOWN, pictures_markdown
from ..errors import ItemError

DETAILS_META = "details"
# step figures worth a curve across runs (the step's own ``dagster_metadata`` are too)
PLOTTED = frozenset(
    {
        "notes_in",
        "items",
        "items_per_s",
        "seconds",
        "loader_wait_s",
        "on_item_batch_s",
        "max_notes_queued",
        "notes_reused",  # an incremental step's (docs/incremental.md)
        "notes_computed",
    }
)
REUSED_FROM = "reused_from"  # an incremental step: the earlier runs whose notes it reused
# whole-step counts a pin's row count replaces, and duplicates of ``errors_skipped``
LEFT_OUT = frozenset({"notes_out", "notes", "notes_failed", "items_skipped"})
FILES_NOTE = "files_note"  # why a step whose dump_fn ran has no files_written
_MAX_ERROR_ROWS = 50


def figure(value: Any) -> Any:
    """A number as an int or float metadata value; anything else as text (never plotted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return dg.MetadataValue.text(str(value))
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    return dg.MetadataValue.float(float(value))


def error_metadata(errors: Sequence[ItemError]) -> Dict[str, Any]:
    """``errors_skipped`` (plotted) and, when there are any, the first errors as a table."""
    if not errors:
        return {"errors_skipped": dg.MetadataValue.int(0)}
    rows = [
        dg.TableRecord(
            {
                "stage": e.stage,
                "note": e.note_index,
                "item": "" if e.item_index is None else f"{e.item_index}: {e.item}",
                "error": e.headline(),
            }
        )
        for e in errors[:_MAX_ERROR_ROWS]
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("stage", "string"),
            dg.TableColumn("note", "int"),
            dg.TableColumn("item", "string"),
            dg.TableColumn("error", "string"),
        ]
    )
    meta: Dict[str, Any] = {
        "errors_skipped": dg.MetadataValue.int(len(errors)),
        "errors": dg.MetadataValue.table(rows, schema=schema),
    }
    pictures = pictures_markdown([(e.headline(), e.picture) for e in errors[:PICTURES_SHOWN]])
    if pictures is not None:
        meta["errors_preview"] = pictures
    return meta


def step_metadata(
    stats: Mapping[str, Any],
    files: List[Tuple[str, int]],
    errors: Sequence[ItemError],
    figures: Mapping[str, Any],
) -> Dict[str, Any]:
    """The metadata every pin of one step run shares (the module docstring says what and why).

    ``stats`` are the driver's (``StepResult.stats``), ``figures`` the step's own
    ``dagster_metadata`` (recorded as given: the step chose them).
    """
    meta: Dict[str, Any] = {}
    details: Dict[str, Any] = {}
    for key, value in stats.items():
        if key in LEFT_OUT:
            continue
        if key in PLOTTED or key.startswith("notes_dropped_"):
            meta[key] = figure(value)
        elif key == REUSED_FROM:  # {run id: notes}
            meta[key] = dg.MetadataValue.json(dict(value))
        else:
            details[key] = value
    if files:
        meta["files_written"] = dg.MetadataValue.int(len(files))
        meta["files_bytes"] = dg.MetadataValue.int(sum(size for _, size in files))
        meta["files_sample"] = dg.MetadataValue.json([p for p, _ in files[:10]])
    elif stats.get("dumps"):  # say why there is no files_written rather than leave it out
        meta[FILES_NOTE] = dg.MetadataValue.text(
            f"dump_fn ran {stats['dumps']} times and no file was recorded: only the paths it "
            "returns and the files it writes through "
            "dagster_graphbook.authoring.files.atomic_path() are "
            "(files_written, files_bytes, files_manifest)"
        )
    meta.update(error_metadata(errors))
    meta.update({key: figure(value) for key, value in figures.items()})
    if details:  # JSON-safe: a step's stats may hold any value
        meta[DETAILS_META] = dg.MetadataValue.json(json.loads(json.dumps(details, default=str)))
    return meta
