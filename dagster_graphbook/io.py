"""The notes IO manager: each pin's notes pickled per asset (and partition), so any step can be
re-materialized from its stored parents. Sink pins whose notes are flat dicts are also written as
a Parquet table (through pandas) that users can open."""

from __future__ import annotations

import os
import pickle
from typing import Any, Dict, List, Optional

import dagster as dg
from upath import UPath

from . import notes_codec

NOTES_IO_MANAGER_KEY = "graphbook_notes"
_SCALARS = (str, int, float, bool, type(None))


def is_flat_table(notes: List[Any]) -> bool:
    """Notes that make a table: dicts whose values are scalars or lists of scalars."""
    return bool(notes) and all(
        isinstance(n, dict) and all(isinstance(v, _SCALARS) or (isinstance(v, list) and all(isinstance(x, _SCALARS) for x in v)) for v in n.values())
        for n in notes
    )


def _write_atomic(path: UPath, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.protocol in ("", "file", "local"):
        tmp = f"{path.path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path.path)
    else:  # object stores write whole objects anyway
        path.write_bytes(data)


class NotesStore(dg.UPathIOManager):
    """Pickled note lists under ``<base>/<asset key path>[/<partition>].pkl``."""

    extension = ".pkl"

    def dump_to_path(self, context: dg.OutputContext, obj: Any, path: UPath) -> None:
        _write_atomic(path, notes_codec.dumps(obj))  # a tensor view costs its own bytes
        meta: Dict[str, Any] = {"notes": dg.MetadataValue.int(len(obj)), "dagster/row_count": dg.MetadataValue.int(len(obj)), "notes_path": dg.MetadataValue.path(str(path))}
        if (context.definition_metadata or {}).get("dagster_graphbook/sink") and is_flat_table(obj):
            from .tables import write_table

            meta.update(write_table(obj, path.with_suffix(".parquet")))
        context.add_output_metadata(meta)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> Any:
        with path.open("rb") as f:
            return pickle.load(f)



class NotesIOManager(dg.ConfigurableIOManagerFactory):
    """Where notes live: ``base_dir`` (a local path or any fsspec URL, e.g. ``s3://bucket/notes``
    for runs spread over machines), by default ``<instance storage>/graphbook``."""

    base_dir: Optional[str] = None

    def create_io_manager(self, context: dg.InitResourceContext) -> NotesStore:
        base = self.base_dir
        if base is None:
            storage = context.instance.storage_directory() if context.instance is not None else os.path.join(os.environ.get("DAGSTER_HOME", "."), "storage")
            base = os.path.join(storage, "graphbook")
        return NotesStore(base_path=UPath(base))
