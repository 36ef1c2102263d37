"""The store of incremental runs: each note's outputs as its step made them, kept to reuse while
the note's key holds (docs/incremental.md).

It lives beside the notes, ``<notes_dir>/incremental/<workflow>/<step>/<partition>/`` (a local
folder or a bucket prefix). Each run of a step (each shard) writes one *pack* when the step ends:
every note it computed or reused, by key, written atomically, so a run killed mid-step leaves
no pack and nothing half-done is ever trusted. A reader takes each key's newest entry over all
packs. Each entry's notes are pickled alone: an entry that cannot be read is a miss, as is every
entry of a pack that cannot be read.

Retention: the next run of the step removes the packs whose every key a newer pack holds (after
a minute: a run that listed a pack may still be opening it) and the packs older than
``RETENTION_DAYS``; a note reused in a run is written again in that run's pack, so what is in use
stays. A run reads every pack it needs when its step starts, so nothing is pruned from under it.
"""

from __future__ import annotations

import pickle
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from upath import UPath

from . import codec as notes_codec
from .versions import _is_local, _mtime, write_atomic

FOLDER = "incremental"
PACK_SUFFIX = ".pack"
FORMAT = 1
RETENTION_DAYS = 30  # a pack not rewritten for this long is removed
# a pack superseded by newer ones stays this long: a run that listed it may be opening it (one
# that finds it gone computes its notes again; nothing is lost)
GRACE_S = 60.0
# the newest packs of a version kept whatever they hold (a run's shards each write one); older
# ones beyond go after their grace: notes whose keys change in every run (an object pickled
# differently in each process) would otherwise pile packs up for the whole retention
MAX_PACKS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]+")


def _segment(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._") or "_"


@dataclass
class Entry:
    """One note's outputs as its step made them: ``outputs`` pickled (``{pin: [notes]}``), the
    files its ``dump_fn`` wrote (path, bytes or None), and the run that computed it."""

    outputs: bytes
    files: List[Tuple[str, Optional[int]]]
    run_id: str
    unchecked: bool = False  # its dump_fn ran and named no file: whether they remain is unknown

    def notes(self) -> Dict[str, List[Any]]:
        return notes_codec.loads(self.outputs)


@dataclass
class _Pack:
    path: UPath
    mtime: float
    keys: Set[str] = field(default_factory=set)
    void: bool = False  # written before a refresh


def _newest_refresh(bodies: Sequence[Tuple[Any, Dict[str, Any], Any]]) -> Tuple[float, float, str]:
    """When the newest refresh run read the store, when it wrote its last pack, and its run id
    (no refresh: nothing voided)."""
    runs: Dict[str, List[float]] = {}
    for _, body, _ in bodies:
        if body.get("refresh"):
            run = runs.setdefault(body["run_id"], [body.get("loaded", 0.0), 0.0])
            run[1] = max(run[1], body["written"])
    if not runs:
        return float("-inf"), float("-inf"), ""
    run_id = max(runs, key=lambda r: runs[r][0])
    return runs[run_id][0], runs[run_id][1], run_id


def encode_outputs(outputs: Mapping[str, List[Any]]) -> bytes:
    """A note's outputs as an entry keeps them (taken when the step made them: a streamed step
    after it may change the same dicts)."""
    return notes_codec.dumps(dict(outputs))


class IncrementalStore:
    """The packs of one step and partition."""

    def __init__(
        self,
        notes_dir: str,
        workflow: str,
        step: str,
        partition: Optional[str],
        token: str = "any",
    ):
        # one folder per step version (its token): a run reads only packs it could reuse from
        self.partition = (
            UPath(notes_dir)
            / FOLDER
            / _segment(workflow)
            / _segment(step)
            / (_segment(partition) if partition else "_unpartitioned")
        )
        self.folder = self.partition / _segment(token[:16])
        self._packs: List[_Pack] = []

    def load(self) -> Tuple[Dict[str, Entry], List[str]]:
        """Every key's newest entry, and a sentence per pack or entry that could not be read.

        A refresh (``--full``) voids what came before it: the packs written before the newest
        refresh pack, and the entries a run that had read the store before that refresh
        reused from it (a run overlapping the refresh would otherwise bring them back)."""
        entries: Dict[str, Entry] = {}
        problems: List[str] = []
        self._packs = []
        bodies = []
        for path, mtime in self._listing(self.folder):
            try:
                raw = path.read_bytes()
            except FileNotFoundError:  # removed by another run's pruning since listed
                continue
            except Exception as exc:
                problems.append(f"{path} cannot be read ({type(exc).__name__}: {exc})")
                continue
            try:
                body = pickle.loads(raw)
                if not isinstance(body, dict) or body.get("format") != FORMAT:
                    raise ValueError("not a pack of this format")
                bodies.append((_Pack(path, mtime), body, dict(body["entries"])))
            except Exception as exc:  # left to the retention: a newer version may read it
                problems.append(f"{path} is damaged ({type(exc).__name__}: {exc})")
        started, finished, refresher = _newest_refresh(bodies)
        for pack, body, stored in bodies:
            self._packs.append(pack)
            if body["run_id"] != refresher and body["written"] < started:
                pack.void = True  # before the refresh: pruned as superseded
                continue
            stale_reuse = body["run_id"] != refresher and body.get("loaded", 0.0) < finished
            for key, value in stored.items():
                try:
                    outputs, files, run_id, unchecked = value
                    entry = Entry(
                        bytes(outputs), [tuple(f) for f in files], str(run_id), bool(unchecked)
                    )
                except Exception as exc:
                    problems.append(f"an entry of {path} is damaged ({type(exc).__name__}: {exc})")
                    continue
                if stale_reuse and entry.run_id != body.get("run_id"):
                    continue  # reused from before the refresh
                entries[key] = entry
                pack.keys.add(key)
        return entries, problems

    def _listing(self, folder: UPath) -> List[Tuple[UPath, float]]:
        """The packs in ``folder``, oldest first (a later pack's entry of a key wins)."""
        if not _is_local(folder):
            folder.fs.invalidate_cache()
        try:
            children = list(folder.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for path in children:
            if not path.name.endswith(PACK_SUFFIX) or path.name.startswith("."):
                continue
            try:
                found.append((path, _mtime(path)))
            except FileNotFoundError:
                continue
        return sorted(found, key=lambda p: (p[1], p[0].name))

    def probe(self) -> Optional[str]:
        """Why nothing can be written here (None: a local folder that takes a file, or a bucket,
        whose failure shows when the pack is written)."""
        if not _is_local(self.folder):
            return None
        probe = self.folder / f".probe-{uuid.uuid4().hex[:8]}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            return f"{self.folder} takes no file ({type(exc).__name__}: {exc})"
        return None

    def save(
        self,
        entries: Mapping[str, Entry],
        run_id: str,
        *,
        loaded: float = 0.0,
        refresh: bool = False,
    ) -> UPath:
        """Write one pack of ``entries`` (atomically: whole or not at all). ``loaded``: when the
        run read the store (``time.time()``); ``refresh``: a run that recomputed every note, whose
        pack voids the older ones."""
        body = {
            "format": FORMAT,
            "run_id": run_id,
            "written": time.time(),
            "loaded": loaded,
            "refresh": refresh,
            "entries": {
                k: (e.outputs, list(e.files), e.run_id, e.unchecked) for k, e in entries.items()
            },
        }
        path = self.folder / f"{_segment(run_id)}-{uuid.uuid4().hex[:8]}{PACK_SUFFIX}"
        # not synced to disk: a pack lost to a crash is a miss (its notes computed again)
        write_atomic(
            path, lambda f: pickle.dump(body, f, protocol=notes_codec.PROTOCOL), durable=False
        )
        return path

    def prune(self, saved: Sequence[str], now: Optional[float] = None) -> int:
        """Remove the packs listed by ``load`` that the newer ones (and the keys ``saved`` in
        this run's pack) hold entirely, or that are past the retention; returns how many."""
        now = time.time() if now is None else now
        newer: Set[str] = set(saved)
        removed = 0
        ours = 1 if saved else 0  # this run's pack, the newest
        for rank, pack in enumerate(reversed(self._packs)):  # newest first
            age = now - pack.mtime
            beyond = rank + ours >= MAX_PACKS
            superseded = age > GRACE_S and (pack.void or beyond or pack.keys <= newer)
            if superseded or age > RETENTION_DAYS * 86400:
                try:
                    pack.path.unlink()
                    removed += 1
                except FileNotFoundError:
                    pass
                continue
            newer |= pack.keys
        return removed + self._prune_other_versions(now)

    def _prune_other_versions(self, now: float) -> int:
        """Remove the packs of the step's other versions (other code, parameters or resources)
        past the retention, and their folders once empty."""
        removed = 0
        try:
            versions = [p for p in self.partition.iterdir() if p.name != self.folder.name]
        except (FileNotFoundError, NotADirectoryError):
            return 0
        for version in versions:
            packs = self._listing(version)
            old = [p for p, mtime in packs if now - mtime > RETENTION_DAYS * 86400]
            for path in old:
                try:
                    path.unlink()
                    removed += 1
                except FileNotFoundError:
                    pass
            if len(old) == len(packs) and _is_local(version):
                try:
                    version.rmdir()  # only if empty (a pack written since stays)
                except OSError:
                    pass
        return removed


def files_present(files: Sequence[Tuple[str, Optional[int]]], sizes: Mapping[str, int]) -> bool:
    """Whether every file an entry records is there with its recorded size (``sizes``: what the
    caller found of each, missing ones absent)."""
    for path, size in files:
        found = sizes.get(path)
        if found is None or (size is not None and found != size):
            return False
    return True
