"""Sink pins as tables: Parquet through pandas, with the metadata Dagster's UI shows for tables."""

from __future__ import annotations

from typing import Any, Dict, List

import dagster as dg

_PREVIEW_ROWS = 5


def write_table(notes: List[dict], path: Any) -> Dict[str, Any]:
    """Write notes as Parquet at ``path`` (atomically); return row count, schema, preview, path."""
    import pandas as pd

    from .versions import write_atomic

    df = pd.DataFrame.from_records(notes)
    write_atomic(path, lambda f: df.to_parquet(f, index=False))
    schema = dg.TableSchema(columns=[dg.TableColumn(str(c), str(t)) for c, t in df.dtypes.items()])
    # the first rows as a table the UI renders (cells as text: notes hold lists, tensors, paths)
    head = df.head(_PREVIEW_ROWS).astype(str)
    preview = dg.MetadataValue.table(
        records=[dg.TableRecord(dict(zip(map(str, head.columns), row))) for row in head.values],
        schema=dg.TableSchema(columns=[dg.TableColumn(str(c), "string") for c in head.columns]),
    )
    return {
        "dagster/row_count": dg.MetadataValue.int(len(df)),
        "dagster/column_schema": dg.MetadataValue.table_schema(schema),
        "preview": preview,  # io_manager moves it to table_preview beside a pin's thumbnails
        "table_path": dg.MetadataValue.path(str(path)),
    }
