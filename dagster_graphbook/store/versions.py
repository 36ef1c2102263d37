"""Where each materialization's notes live, and which version a step reads.

Layout: ``<base>/<asset key path>/[<partition>/]<run id>.pkl`` (and ``<run id>.parquet`` for sink
tables, ``<run id>.files.json`` for the files a batch step wrote, see ``manifests``). A version
is written once by one run and never changed, so two runs of one partition never see each
other's data. A step reads its parent's notes from its own run when the parent ran in it (or in
the run it re-executes), else the version that the parent's latest materialization of the
partition recorded in its ``dagster/uri`` metadata.
"""

from __future__ import annotations

import os
import uuid
from typing import IO, Any, Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

import dagster as dg
from upath import UPath
from upath._stat import UPathStatResult

from ..authoring._tempfiles import own_prefix, staged_upload, sweep_local_temporaries
from ..errors import StoredNotesError
from . import codec as notes_codec

NOTES_SUFFIX = ".pkl"
TABLE_SUFFIX = ".parquet"
MANIFEST_SUFFIX = ".files.json"  # the files a batch step's dump_fn wrote in the run (manifests)


def version_folder(base: UPath, key: dg.AssetKey, partition: Optional[str]) -> UPath:
    """The folder holding every stored version of one asset (partition)."""
    folder = base.joinpath(*key.path)
    return folder / partition if partition is not None else folder


NOTES_URI_META = "dagster/uri"  # where the notes are: the key of Dagster's UriMetadataSet
LEGACY_NOTES_PATH_META = "notes_path"  # the same, in materializations recorded before


def stored_notes_path(metadata: Mapping[str, Any]) -> Optional[str]:
    """The notes file a materialization recorded (``dagster/uri``, or an older ``notes_path``)."""
    for key in (NOTES_URI_META, LEGACY_NOTES_PATH_META):
        if key in metadata:
            return str(getattr(metadata[key], "value", metadata[key]))
    return None


def notes_path(folder: UPath, run_id: str) -> UPath:
    return folder / f"{run_id}{NOTES_SUFFIX}"


STEP_OUTPUTS = ".step_outputs"  # beside the assets: outputs that are no asset (a shard's)


def step_output_path(
    base: UPath, run_id: str, step_key: str, output: Sequence[str], partition: Optional[str]
) -> UPath:
    """Where an op output that is no asset lives (a sharded step's slices and shard results):
    ``<base>/.step_outputs/<node>/[<partition>/]<run id>/<step key>/<output>[/<mapping key>].pkl``,
    written once by its run (the run that produced it, also when a re-execution reads it).
    ``<node>`` (the step key's top-level node, the sharded step) and the run's partition are
    the unit its runs are pruned by, as an asset's versions are per partition."""
    *folders, last = [str(part) for part in output]
    folder = _step_outputs_folder(base, step_key, partition)
    return folder.joinpath(run_id, step_key, *folders) / f"{last}{NOTES_SUFFIX}"


def _step_outputs_folder(base: UPath, step_key: str, partition: Optional[str]) -> UPath:
    folder = base.joinpath(STEP_OUTPUTS, step_key.split(".")[0].split("[")[0])
    return folder / partition if partition is not None else folder


def prune_step_outputs(
    base: UPath,
    step_key: str,
    partition: Optional[str],
    keep: int,
    instance: Optional[dg.DagsterInstance],
    run_id: str,
) -> List[str]:
    """Delete all but the ``keep`` newest runs' outputs of ``step_key``'s node and partition,
    as ``prune`` does with its notes; never an unfinished run's, nor those of ``run_id`` and the
    runs it re-executes (a resume reads them). Best effort: a folder another shard or run
    deletes first is skipped."""
    folder = _listed_fresh(_step_outputs_folder(base, step_key, partition))
    if keep <= 0 or not folder.exists():
        return []
    runs = {p.name: p for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir()}
    if partition is None and instance is not None:  # never a partition's folder
        runs = {r: p for r, p in runs.items() if instance.has_run(r)}
    try:
        stale = _stale(runs, keep, instance, run_lineage(instance, run_id))
    except FileNotFoundError:  # pruned meanwhile by another writer
        return []
    deleted = []
    for stale_run in stale:
        try:
            runs[stale_run].fs.rm(runs[stale_run].path, recursive=True)
            deleted.append(stale_run)
        except FileNotFoundError:
            continue
    return deleted


def read_step_output(path: UPath, step_key: str, run_id: str) -> Any:
    """A stored op output that is no asset; gone or damaged, the error names the step."""
    try:
        with path.open("rb") as f:
            return notes_codec.load(f)
    except Exception as exc:
        raise StoredNotesError(
            f"the output of step {step_key} cannot be read ({path}): {type(exc).__name__}: "
            f"{exc}; re-execute that step",
            asset="",
            partition=None,
            run_id=run_id,
            path=str(path),
        ) from exc


def describe(key: dg.AssetKey, partition: Optional[str]) -> str:
    """``workflow/Step (partition 2025-06-01)``, as messages name a stored asset."""
    return f"{key.to_user_string()}{f' (partition {partition})' if partition else ''}"


def read_notes(path: UPath, key: dg.AssetKey, partition: Optional[str] = None) -> Any:
    """The one reader of stored notes: a missing or damaged file fails naming the asset, the
    partition, the run that wrote it and the file, and how to get the notes back."""
    run_id = path.name[: -len(NOTES_SUFFIX)] if path.name.endswith(NOTES_SUFFIX) else None
    where = describe(key, partition)
    written = f" written by run {run_id}" if run_id else ""
    try:
        with path.open("rb") as f:
            return notes_codec.load(f)
    except FileNotFoundError as exc:
        headline = (
            f"the notes of {where}{written} are gone ({path}): deleted by hand, or by the "
            f"notes_keep retention; materialize {key.to_user_string()} again"
        )
        cause: BaseException = exc
    except Exception as exc:  # truncated, overwritten, empty: whatever pickle makes of it
        headline = (
            f"the notes of {where}{written} cannot be read ({path}): {type(exc).__name__}: "
            f"{exc}. The file is damaged (cut short or overwritten); materialize "
            f"{key.to_user_string()} again for this partition to write a new version"
        )
        cause = exc
    raise StoredNotesError(
        headline, asset=key.to_user_string(), partition=partition, run_id=run_id, path=str(path)
    ) from cause


def _is_local(path: UPath) -> bool:
    return path.protocol in ("", "file", "local")


def write_atomic(path: UPath, write: Callable[[IO[bytes]], object], durable: bool = True) -> None:
    """Write through ``write(file)`` to a temporary name beside ``path``, then rename over it.

    A kill at any moment leaves either the old file or the new one under the final name; the
    temporary file is removed on every failure this process sees (a ``kill -9`` leaves it, and the
    next write in the folder sweeps it, see ``sweep_temporaries``). ``durable``: synced to disk
    before the rename (a cache that may be lost, the incremental store's packs, skips it). In an
    object store
    (``s3://...``) the temporary file is local and uploaded once complete: the object appears
    whole or not at all (an fsspec file written in place would publish what a failed ``write``
    left, as closing it uploads), and an upload that fails raises ``OSError`` naming the URL.
    """
    if not _is_local(path):  # no folders to make: s3fs's mkdir would create a missing bucket
        with staged_upload(str(path), path.fs, path.path) as tmp:
            with open(tmp, "wb") as f:
                write(f)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    final = path.path
    sweep_temporaries(path.parent)
    name = f"{own_prefix()}{uuid.uuid4().hex[:8]}-{os.path.basename(final)}"
    tmp = os.path.join(os.path.dirname(final), name)
    try:
        with open(tmp, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def sweep_temporaries(folder: UPath) -> None:
    """Remove temporary files that a killed writer on this machine left (its pid is gone). A
    bucket holds none: its temporaries are local (``staged_upload``), swept where they are."""
    if _is_local(folder):
        sweep_local_temporaries(folder.path)


def _listed_fresh(folder: UPath) -> UPath:
    """``folder``, its store's cached listings dropped: another process (a shard, another run)
    may have written or deleted since this one listed (s3fs caches every listing)."""
    if not _is_local(folder):
        folder.fs.invalidate_cache()
    return folder


def recorded_path(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition: Optional[str]
) -> Optional[str]:
    """The notes path of the latest materialization of ``key`` (in ``partition``), if any."""
    partitions = [partition] if partition is not None else None
    records_filter = dg.AssetRecordsFilter(asset_key=key, asset_partitions=partitions)
    for record in instance.fetch_materializations(records_filter, limit=1).records:
        materialization = record.asset_materialization
        path = stored_notes_path(materialization.metadata) if materialization else None
        if path is not None:
            return path
    return None


READ_META = "dagster_graphbook/read_notes"  # input metadata: the notes version a step read


def version_used_by(
    instance: dg.DagsterInstance, run_id: str, key: dg.AssetKey, partition: Optional[str]
) -> Optional[Tuple[str, bool]]:
    """The notes version of ``key`` (in ``partition``) that run ``run_id`` materialized (then
    ``(path, True)``) or else read (``(path, False)``, from ``READ_META`` input metadata); None
    when it did neither."""
    kinds = {dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_OBSERVATION}
    read = None
    for record in instance.all_logs(run_id, of_type=kinds):
        event = record.asset_materialization or record.asset_observation
        if event is None or event.asset_key != key:
            continue
        if partition is not None and event.partition != partition:
            continue
        if record.asset_materialization is not None:
            written = stored_notes_path(event.metadata)
            if written is not None:
                return written, True
        elif READ_META in event.metadata:
            read = str(event.metadata[READ_META].value)
    return (read, False) if read is not None else None


def run_lineage(instance: Optional[dg.DagsterInstance], run_id: str) -> List[str]:
    """This run, then the runs it re-executes (parent, grandparent, ...)."""
    ids = [run_id]
    while instance is not None:
        run = instance.get_run_by_id(ids[-1])
        if run is None or not run.parent_run_id or run.parent_run_id in ids:
            break
        ids.append(run.parent_run_id)
    return ids


def prune(
    folder: UPath, keep: int, instance: Optional[dg.DagsterInstance], protect: Iterable[str] = ()
) -> List[str]:
    """Delete all but the ``keep`` newest versions in ``folder``; never one of an unfinished run.

    Returns the run ids whose versions were deleted.
    """
    if keep <= 0 or not _listed_fresh(folder).exists():
        return []
    versions = {p.name[: -len(NOTES_SUFFIX)]: p for p in folder.iterdir() if _is_version(p.name)}
    deleted = _stale(versions, keep, instance, protect)
    for run_id in deleted:
        for suffix in (NOTES_SUFFIX, TABLE_SUFFIX, MANIFEST_SUFFIX):
            try:
                (folder / f"{run_id}{suffix}").unlink()
            except FileNotFoundError:
                pass
    return deleted


def _stale(
    by_run: Mapping[str, UPath],
    keep: int,
    instance: Optional[dg.DagsterInstance],
    protect: Iterable[str],
) -> List[str]:
    """The runs (of ``run id -> path``) beyond the ``keep`` newest, less the protected and the
    unfinished ones."""
    newest_first = sorted(by_run, key=lambda r: _mtime(by_run[r]), reverse=True)
    kept = set(protect)
    return [r for r in newest_first[keep:] if r not in kept and not _unfinished(instance, r)]


def _is_version(name: str) -> bool:
    return name.endswith(NOTES_SUFFIX) and not name.startswith(".")


def _mtime(path: UPath) -> float:
    """When ``path`` was written. An object store names it ``LastModified`` (UPath's stat reads
    each store's name), and a folder there is a prefix with no time of its own: its newest
    object's counts (a run's outputs folder)."""
    if _is_local(path) or not path.is_dir():
        return path.stat().st_mtime
    found = path.fs.find(path.path, detail=True).values()
    return max((UPathStatResult.from_info(info).st_mtime for info in found), default=0.0)


def _unfinished(instance: Optional[dg.DagsterInstance], run_id: str) -> bool:
    if instance is None:
        return False
    run = instance.get_run_by_id(run_id)
    return run is not None and not run.is_finished


def other_runs_in_progress(
    instance: Optional[dg.DagsterInstance],
    run_id: str,
    job_name: Optional[str],
    partition: Optional[str],
) -> List[str]:
    """Ids of other unfinished runs of this job (and partition)."""
    if instance is None or not job_name:
        return []
    tags = {"dagster/partition": partition} if partition is not None else {}
    statuses = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING]
    runs = instance.get_runs(
        filters=dg.RunsFilter(job_name=job_name, statuses=statuses, tags=tags), limit=20
    )
    return [r.run_id for r in runs if r.run_id != run_id]
