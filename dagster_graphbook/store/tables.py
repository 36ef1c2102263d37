"""Sink pins as tables: Parquet through pandas, with the metadata Dagster's UI shows for tables."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import dagster as dg

_PREVIEW_ROWS = 5
_CELL_CHARS = 200


def write_table(notes: List[dict], path: Any) -> Dict[str, Any]:
    """Write notes as Parquet at ``path`` (atomically); return row count, schema, preview, path."""
    import pandas as pd

    from .versions import write_atomic

    df = _one_type_per_column(pd.DataFrame.from_records(notes))
    write_atomic(path, lambda f: df.to_parquet(f, index=False))
    schema = dg.TableSchema(columns=[dg.TableColumn(str(c), str(t)) for c, t in df.dtypes.items()])
    return {
        "dagster/row_count": dg.MetadataValue.int(len(df)),
        "dagster/column_schema": dg.MetadataValue.table_schema(schema),
        "preview": table_preview(df),  # io_manager moves it to table_preview beside thumbnails
        "table_path": dg.MetadataValue.path(str(path)),
    }


def _one_type_per_column(df: Any) -> Any:
    """``df`` with each column of mixed value types (numbers and strings, as notes hold
    ``"1.5"`` beside ``2.5``; lists and text; lists of mixed elements) as text, missing values
    kept missing: Parquet stores one type per column."""
    objects = [c for c in df.columns if df[c].dtype == object]
    mixed = [c for c in objects if len(_kinds(df[c])) > 1 or not _arrow_takes(df[c])]
    if not mixed:
        return df
    df = df.copy()
    for column in mixed:
        df[column] = [None if _missing(v) else str(v) for v in df[column]]
    return df


def _arrow_takes(values: Any) -> bool:
    """Whether Parquet can store ``values`` as one column: lists or dicts whose elements mix
    types (``[1, "x"]``, ``{"k": 1}`` beside ``{"k": "s"}``) it cannot."""
    import pyarrow as pa  # type: ignore[import-untyped]

    try:
        pa.array(values.tolist(), from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False
    return True


def _kinds(values: Any) -> set:
    """The kinds of the non-missing ``values``: numbers (bool apart) count as one."""
    kinds = set()
    for v in values:
        if not _missing(v):
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            kinds.add("number" if number else type(v).__name__)
    return kinds


def table_preview(df: Any) -> dg.MetadataValue:
    """The first rows of ``df`` as a table the UI renders: every cell text (one type per column;
    notes hold lists, tensors, paths, numbers as strings), a missing value (None, NaN, NaT) an
    empty cell (JSON null: a NaN in a record is no JSON, and the UI then shows "Could not parse
    record"), a list, dict or tensor short text on one line."""
    head = df.head(_PREVIEW_ROWS)
    columns = [str(c) for c in head.columns]
    records = [
        dg.TableRecord(dict(zip(columns, map(_cell, row))))
        for row in head.itertuples(index=False, name=None)
    ]
    return dg.MetadataValue.table(
        records=records,
        schema=dg.TableSchema(columns=[dg.TableColumn(c, "string") for c in columns]),
    )


def _cell(value: Any) -> Optional[str]:
    """``value`` as a preview cell: text of at most ``_CELL_CHARS``, or None when missing."""
    if _missing(value):
        return None
    text = value if isinstance(value, str) else " ".join(str(value).split())
    return text if len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 1] + "…"


def _missing(value: Any) -> bool:
    """None, NaN, pd.NA or NaT (a list or an array is not missing)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    if isinstance(value, (str, list, tuple, dict)):
        return False
    try:
        import pandas as pd

        return pd.isna(value) is True
    except (TypeError, ValueError):
        return False
