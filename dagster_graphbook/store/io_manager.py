"""The notes IO manager: each materialization pickles its pin's notes as a new immutable version
under its run id (see ``versions``), so runs never read each other's data and any step can be
re-materialized from its parents' recorded versions. Sink pins whose notes are flat dicts are also
written as a Parquet table (through pandas) that users can open.

Where notes live comes from the code location (``notes_dir`` on ``build_definitions``,
``GraphbookWorkflow`` or the YAML component, carried in each asset's definition metadata) or the
instance (``<storage>/graphbook``), never from run config: the IO manager has no config.
"""

from __future__ import annotations

import os
import pickle
from typing import Any, Dict, List, Mapping, Optional

import dagster as dg
from upath import UPath

from ..errors import StoredNotesError
from ..plan.job_steps import read_node_info
from . import codec as notes_codec
from . import versions
from .previews import PREVIEW_META, TABLE_PREVIEW_META

NOTES_DIR_META = "dagster_graphbook/notes_dir"
NOTES_KEEP_META = "dagster_graphbook/notes_keep"
DEFAULT_KEEP = 3
_SCALARS = (str, int, float, bool, type(None))


def is_flat_table(notes: List[Any]) -> bool:
    """Notes that make a table: dicts whose values are scalars or lists of scalars."""

    def flat(v: Any) -> bool:
        return isinstance(v, _SCALARS) or (
            isinstance(v, list) and all(isinstance(x, _SCALARS) for x in v)
        )

    return bool(notes) and all(
        isinstance(n, dict) and all(flat(v) for v in n.values()) for n in notes
    )


def pickle_notes(obj: Any, f: Any) -> None:
    """The one place notes are pickled: a tensor view costs its own bytes (notes_codec)."""
    notes_codec.dump(obj, f)


def _unpicklable(notes: Any) -> str:
    """Which note and key cannot be pickled, as the start of an error message ('' if not found).
    An output that is no list of notes (a shard's) may list its notes with ``note_lists()``."""
    if hasattr(notes, "note_lists"):
        return next((found for one in notes.note_lists() if (found := _unpicklable(one))), "")
    for index, note in enumerate(notes if isinstance(notes, list) else []):
        for key, value in note.items() if isinstance(note, dict) else [(None, note)]:
            try:
                pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                where = f"note {index}" + (f", key {key!r}" if key is not None else "")
                return f"{where} ({type(value).__name__}) "
    return ""


def _cannot_store(what: str, obj: Any, path: UPath, exc: Exception) -> str:
    """Why ``what`` could not be written: the note that cannot be pickled, else the error with
    the file it was writing and, for an OS error on this machine, the file system (a full disk
    says which one is full)."""
    note = _unpicklable(obj)
    if note:
        return f"{what}: {note}cannot be stored: {type(exc).__name__}: {exc}"
    where = str(path)
    if isinstance(exc, OSError) and versions._is_local(path):
        where += _file_system(path.path)
    return f"{what} cannot be stored at {where}: {type(exc).__name__}: {exc}"


def _file_system(path: str) -> str:
    """`` (on the <type> file system mounted at <dir>, <n> MiB free)`` of a local path."""
    mount = os.path.abspath(path)
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    kind = "?"
    try:
        with open("/proc/self/mounts") as f:  # the last entry of a mount point is the visible one
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[1].replace("\\040", " ") == mount:
                    kind = fields[2]
        stat = os.statvfs(mount)
    except OSError:  # not Linux, or the mount went away
        return f" (on the file system mounted at {mount})"
    free = stat.f_bavail * stat.f_frsize / 2**20
    return f" (on the {kind} file system mounted at {mount}, {free:.1f} MiB free now)"


def _partition(context: Any) -> Optional[str]:
    if not context.has_asset_partitions:
        return None
    keys = list(context.asset_partition_keys)
    if len(keys) != 1:
        raise dg.Failure(
            f"{context.asset_key.to_user_string()}: notes are stored per partition; a run over "
            f"{len(keys)} partitions at once is not supported (run one partition per run)"
        )
    return keys[0]


class NotesStore(dg.IOManager):
    """Versioned, run-isolated note lists (see the module docstring)."""

    def __init__(self, default_base: str) -> None:
        self.default_base = default_base

    def _base(self, metadata: Optional[Mapping[str, Any]]) -> UPath:
        return UPath((metadata or {}).get(NOTES_DIR_META) or self.default_base)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if not context.has_asset_key:  # a sharded step's slices and shard results
            self._store_step_output(context, obj)
            return
        partition = _partition(context)
        folder = versions.version_folder(
            self._base(context.definition_metadata), context.asset_key, partition
        )
        path = versions.notes_path(folder, context.run_id)
        try:
            versions.write_atomic(path, lambda f: pickle_notes(obj, f))
        except Exception as exc:
            raise dg.Failure(
                _cannot_store(context.asset_key.to_user_string(), obj, path, exc)
            ) from exc
        meta: Dict[str, Any] = {  # the version is the run id, in the path
            "dagster/row_count": dg.MetadataValue.int(len(obj)),
            versions.NOTES_URI_META: dg.MetadataValue.path(str(path)),
        }
        lost = sum(1 for n in obj if isinstance(n, dict) and n.get(notes_codec.LOST_ITEMS_KEY))
        if lost:
            meta["notes_with_lost_items"] = dg.MetadataValue.int(lost)
        if read_node_info(context.definition_metadata).get("sink") and is_flat_table(obj):
            from .tables import write_table

            table = write_table(obj, folder / f"{context.run_id}{versions.TABLE_SUFFIX}")
            if PREVIEW_META in (context.output_metadata or {}):  # the pin's thumbnails are preview
                table[TABLE_PREVIEW_META] = table.pop(PREVIEW_META)
            meta.update(table)
        context.add_output_metadata(meta)
        instance = _instance(context)
        others = versions.other_runs_in_progress(
            instance, context.run_id, _job_name(context), partition
        )
        if others:
            context.log.warning(
                f"{context.asset_key.to_user_string()}"
                f"{f' (partition {partition})' if partition else ''}: run(s) {', '.join(others)} "
                "of this job are in progress too; each run reads and writes only its own notes, "
                "and "
                "the asset's "
                "latest materialization is whichever run writes last"
            )
        keep = int((context.definition_metadata or {}).get(NOTES_KEEP_META, DEFAULT_KEEP))
        versions.prune(folder, keep, instance, protect=[context.run_id])

    def _store_step_output(self, context: dg.OutputContext, obj: Any) -> None:
        """An op output that is no asset, beside the workflow's notes, pruned as they are."""
        run_id, step_key = _source_run_id(context, context), str(context.step_key)
        base, partition = self._base(context.definition_metadata), _run_partition(context)
        path = versions.step_output_path(base, run_id, step_key, _output_of(context), partition)
        try:
            versions.write_atomic(path, lambda f: pickle_notes(obj, f))
        except Exception as exc:
            output = "/".join(_output_of(context))
            raise dg.Failure(
                _cannot_store(f"output {output!r}", obj, path, exc),  # Dagster names the step
                allow_retries=isinstance(exc, OSError),  # a note that cannot be pickled stays so
            ) from exc
        keep = int((context.definition_metadata or {}).get(NOTES_KEEP_META, DEFAULT_KEEP))
        versions.prune_step_outputs(base, step_key, partition, keep, _instance(context), run_id)

    def load_input(self, context: dg.InputContext) -> Any:
        upstream = context.upstream_output
        if not context.has_asset_key and upstream is not None:  # an op output that is no asset
            run_id = _source_run_id(upstream, context)
            step_key = str(upstream.step_key)
            stored = versions.step_output_path(
                self._base(upstream.definition_metadata),
                run_id,
                step_key,
                _output_of(upstream),
                _run_partition(context),  # a re-execution keeps its parent's partition
            )
            return versions.read_step_output(stored, step_key, run_id)
        key = context.asset_key
        partition = _partition(context)
        metadata = upstream.definition_metadata if upstream else None
        folder = versions.version_folder(self._base(metadata), key, partition)
        instance = _instance(context)
        this_run = _run_id(context)
        path = self._lineage_path(instance, this_run, folder, key, partition, metadata)
        if path is None and instance is not None:
            recorded = versions.recorded_path(instance, key, partition)
            path = UPath(recorded) if recorded else None
        if path is None:
            raise dg.Failure(
                f"no stored notes for {versions.describe(key, partition)}: materialize it first "
                "(its step has not run for this partition)"
            )
        notes = versions.read_notes(path, key, partition)
        # which version this run read, so that a re-execution of it reads the same one
        context.add_input_metadata({versions.READ_META: dg.MetadataValue.path(str(path))})
        return notes

    @staticmethod
    def _lineage_path(
        instance: Optional[dg.DagsterInstance],
        this_run: Optional[str],
        folder: UPath,
        key: dg.AssetKey,
        partition: Optional[str],
        metadata: Optional[Mapping[str, Any]],
    ) -> Optional[UPath]:
        """The parent's notes from this run, else the version the run it re-executes (parent,
        grandparent, ...) materialized or read; None when none of them did either. A
        re-execution never falls back to another run's notes when that version was pruned."""
        for run_id in versions.run_lineage(instance, this_run) if this_run else []:
            candidate = versions.notes_path(folder, run_id)
            if candidate.exists():
                return candidate
            used = (
                None
                if run_id == this_run or instance is None  # no instance: the lineage is this run
                else versions.version_used_by(instance, run_id, key, partition)
            )
            if used is None:
                continue
            path, materialized = UPath(used[0]), used[1]
            if path.exists():
                return path
            how = "materialized" if materialized else f"read the version {path.stem} of"
            keep = int((metadata or {}).get(NOTES_KEEP_META, DEFAULT_KEEP))
            raise StoredNotesError(
                f"run {this_run} re-executes run {run_id}, which {how} "
                f"{versions.describe(key, partition)}, but that version is gone ({path}): "
                f"pruned by the notes_keep={keep} retention after newer runs of this partition "
                "(or deleted by hand). A re-execution reads only what its parent run read, so it "
                f"stops instead of reading another run's notes. Re-execute run {run_id} with all "
                f"its steps (or materialize {key.to_user_string()} and what follows it for this "
                "partition), or keep more versions (notes_keep)",
                asset=key.to_user_string(),
                partition=partition,
                run_id=path.stem,
                path=str(path),
            )
        return None


def _instance(context: Any) -> Optional[dg.DagsterInstance]:
    for get in (lambda: context.instance, lambda: context.step_context.instance):
        try:
            return get()
        except Exception:  # OutputContext has no .instance; contexts built by hand have none
            continue
    return None


def _output_of(context: dg.OutputContext) -> List[str]:
    """The output's name, and its mapping key for one output of a ``DynamicOut``."""
    mapping_key = context.mapping_key
    return [context.name] + ([mapping_key] if mapping_key else [])


def _run_partition(context: Any) -> Optional[str]:
    """The partition of the run writing or reading an op output that is no asset."""
    try:
        step = context.step_context
        return step.partition_key if step.has_partition_key else None
    except Exception:  # a context built by hand has no step context
        return None


def _source_run_id(output: dg.OutputContext, current: Any) -> str:
    """The run that produced ``output``. Dagster knows none for a shard that a from-failure run
    added (defs/reexecution: its run's recorded step selection lacks it); that shard ran in the
    current run, whose id ``current`` (the step's context) gives."""
    try:
        return output.run_id
    except dg.DagsterInvariantViolationError:
        return current.step_context.run_id


def _run_id(context: dg.InputContext) -> Optional[str]:
    """The run loading the input; None outside a run (``Definitions.get_asset_value_loader``)."""
    try:
        return context.step_context.run_id
    except Exception:
        return None


def _job_name(context: dg.OutputContext) -> Optional[str]:
    try:
        return context.job_name
    except Exception:
        return None


def instance_notes_dir(instance: dg.DagsterInstance) -> str:
    """Where notes go when the code location sets no notes_dir: ``<instance storage>/graphbook``."""
    return os.path.join(instance.storage_directory(), "graphbook")


def _default_base(init_context: dg.InitResourceContext) -> str:
    if init_context.instance is not None:
        return instance_notes_dir(init_context.instance)
    return os.path.abspath(
        os.path.join(os.environ.get("DAGSTER_HOME", "."), "storage", "graphbook")
    )


@dg.io_manager(
    config_schema={},
    description="Graphbook notes: one immutable version per materialization, under "
    "the code location's notes_dir or <instance storage>/graphbook",
)
def notes_io_manager(init_context: dg.InitResourceContext) -> NotesStore:
    """No config on purpose: storage locations come from the code location or the instance."""
    return NotesStore(_default_base(init_context))


def in_process_memory(notes_dir: Optional[str]) -> bool:
    """Whether ``notes_dir`` is an fsspec store held in the memory of one process (``memory://``):
    notes a step process writes there are gone for every other process."""
    from upath.implementations.memory import MemoryPath

    try:
        return bool(notes_dir) and isinstance(UPath(str(notes_dir)), MemoryPath)
    except (ImportError, ValueError):  # a protocol fsspec does not know: not its memory store
        return False


def notes_metadata(notes_dir: Optional[str] = None, keep: Optional[int] = None) -> Dict[str, Any]:
    """Asset definition metadata that places a workflow's notes (set by the code location).

    A relative local folder is made absolute against the working directory at definition load:
    the location is recorded in each materialization (``dagster/uri``), which is read from other
    working directories (``dagster dev`` started elsewhere, a notebook). URLs stay as given."""
    meta: Dict[str, Any] = {}
    if notes_dir is not None:
        notes_dir = str(notes_dir)
        local = "://" not in notes_dir
        meta[NOTES_DIR_META] = (
            os.path.abspath(os.path.expanduser(notes_dir)) if local else notes_dir
        )
    if keep is not None:
        meta[NOTES_KEEP_META] = int(keep)
    return meta
