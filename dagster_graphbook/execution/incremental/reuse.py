"""A step run split into reused and computed notes (docs/incremental.md).

``Reuse.split`` keys a feed's notes and finds those whose outputs the store holds, with the files
their ``dump_fn`` wrote still there at their recorded size; the driver computes the others and
hands each one's outputs to ``Reuse.computed``; ``Reuse.finish`` writes the run's pack when the
step ends, after a failure too (a note's outputs are recorded only once it was released whole).
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ...authoring._tempfiles import is_url, url_sizes
from ...errors import Label
from ...store.incremental import Entry, IncrementalStore, encode_outputs, files_present
from .keys import note_keys

REFRESH_TAG = "dagster-graphbook/incremental"  # "refresh": every incremental step recomputes all
_SHOWN_PROBLEMS = 5
# a step holds at most this much of its pack before writing it (a stream's memory stays bounded:
# a long streamed step writes several packs)
PACK_BYTES = 64 * 1024 * 1024


class Reuse:
    """One incremental step's run: what it reused and computed, and the pack it writes."""

    def __init__(
        self,
        store: IncrementalStore,
        token: str,
        *,
        refresh: bool,
        label: Label,
        warn: Callable[[str], None],
        info: Callable[[str], None],
        run_id: str,
    ):
        self.store, self.token, self.refresh, self.label = store, token, refresh, label
        self.warn, self.info, self.run_id = warn, info, run_id
        self.entries: Optional[Dict[str, Entry]] = None  # loaded at the first feed
        self.off: Optional[str] = None  # why this run neither reuses nor records
        self.kept: Dict[str, Entry] = {}  # this run's next pack: reused and computed notes
        self.kept_bytes = 0
        self.saved: List[str] = []  # keys in the packs this run wrote
        self.packs: List[str] = []
        self.reused = 0
        self.computed_notes = 0
        self.from_runs: collections.Counter = collections.Counter()
        self.said: set = set()  # the reasons notes could not be keyed, each warned once
        self.unchecked = 0  # reused notes whose dump_fn named no file (not checked)
        self.loaded = 0.0  # when this run read the store

    def _load(self) -> Dict[str, Entry]:
        if self.entries is None:
            self.entries = {}
            self.loaded = time.time()
            self.off = self.store.probe()
            if self.off is not None:
                self.warn(
                    f"{self.label}: incremental: the store {self.off}: this run reuses and "
                    "records nothing, every note is computed"
                )
            elif not self.refresh:
                try:
                    self.entries, problems = self.store.load()
                except Exception as exc:  # a bucket that cannot be listed: never the run's end
                    self.off = f"{self.store.folder} cannot be listed ({type(exc).__name__}: {exc})"
                    self.warn(
                        f"{self.label}: incremental: the store {self.off}: this run reuses "
                        "and records nothing, every note is computed"
                    )
                    return self.entries
                self._say_problems(problems)
        return self.entries

    def _say_problems(self, problems: Sequence[str]) -> None:
        for problem in problems[:_SHOWN_PROBLEMS]:
            self.warn(f"{self.label}: incremental: {problem}; its notes are computed again")
        if len(problems) > _SHOWN_PROBLEMS:
            self.warn(f"{self.label}: incremental: {len(problems) - _SHOWN_PROBLEMS} more")

    def split(self, notes: Sequence[Any]) -> Tuple[List[Optional[str]], Dict[int, Any]]:
        """Each note's key (None: never reused nor stored) and the outputs of those reused, by
        position in ``notes``."""
        entries = self._load()
        keys, why = note_keys(self.token, notes)
        for reason in why:
            if reason not in self.said:
                self.said.add(reason)
                self.warn(
                    f"{self.label}: incremental: {reason}: such notes are computed in every "
                    "run, never reused"
                )
        if self.off is not None:
            return keys, {}
        found = {i: entries[k] for i, k in enumerate(keys) if k is not None and k in entries}
        sizes = _file_sizes(f for e in found.values() for f, _ in e.files)
        hits: Dict[int, Any] = {}
        problems = []
        for i, entry in found.items():
            if not files_present(entry.files, sizes):
                continue  # a file it wrote is gone or changed: computed again
            try:
                hits[i] = entry.notes()
            except Exception as exc:
                problems.append(
                    f"the entry of note {i} cannot be read ({type(exc).__name__}: {exc})"
                )
                continue
            self._keep(keys[i], entry)  # type: ignore[arg-type]
            self.reused += 1
            self.unchecked += entry.unchecked
            self.from_runs[entry.run_id] += 1
        self._say_problems(problems)
        return keys, hits

    def computed(
        self,
        key: Optional[str],
        outputs: Mapping[str, List[Any]],
        files: Optional[Sequence[Tuple[str, Optional[int]]]],
    ) -> None:
        """A note computed whole in this run: its outputs are recorded (taken now: a streamed
        step after this one may change the same dicts) with the files its dumps wrote (None: no
        dump ran; empty: its dumps named no file)."""
        if key is None or self.off is not None:
            return
        try:
            encoded = encode_outputs(outputs)
        except Exception as exc:  # a note that cannot be pickled cannot be stored either
            self.warn(
                f"{self.label}: incremental: a note's outputs cannot be recorded "
                f"({type(exc).__name__}: {exc}); it is computed again next run"
            )
            return
        self._keep(key, Entry(encoded, list(files or ()), self.run_id, files == []))

    def _keep(self, key: str, entry: Entry) -> None:
        self.kept[key] = entry
        self.kept_bytes += len(entry.outputs)
        if self.kept_bytes > PACK_BYTES:
            self._write()

    def _write(self) -> bool:
        """Write the notes kept so far as one pack; False (said) when it cannot be written."""
        kept, self.kept, self.kept_bytes = self.kept, {}, 0
        if not kept:
            return True
        try:
            self.packs.append(
                str(self.store.save(kept, self.run_id, loaded=self.loaded, refresh=self.refresh))
            )
        except Exception as exc:
            self.warn(
                f"{self.label}: incremental: {len(kept)} notes of this run could not be "
                f"recorded in {self.store.folder} ({type(exc).__name__}: {exc}); the next "
                "run computes them again"
            )
            return False
        self.saved += kept
        return True

    def finish(self) -> None:
        """Write this run's last pack (its reused and computed notes) and prune the older packs."""
        if self.off is not None or self.entries is None:
            return
        if self._write() and self.packs:
            try:
                self.store.prune(self.saved)
            except Exception as exc:
                self.warn(f"{self.label}: incremental: old packs not pruned: {exc}")
        if self.unchecked:
            self.warn(
                f"{self.label}: incremental: {self.unchecked} reused notes had dump_fn calls "
                "that returned no path, so whether their files remain is not checked; after "
                "removing outputs, run with --full (or return the path from dump_fn)"
            )
        saved = ", ".join(self.packs)
        runs = ", ".join(f"{r[:8]} ({n})" for r, n in self.from_runs.most_common(5))
        self.info(
            f"{self.label}: incremental{' (refresh)' if self.refresh else ''}: "
            f"{self.reused} notes reused{f' from runs {runs}' if runs else ''}, "
            f"{self.computed_notes} computed" + (f"; recorded in {saved}" if saved else "")
        )

    def stats(self) -> Dict[str, Any]:
        """The step's figures: notes reused and computed, and which runs computed those reused."""
        stats: Dict[str, Any] = {
            "notes_reused": self.reused,
            "notes_computed": self.computed_notes,
            "incremental": "refresh"
            if self.refresh
            else ("off: " + self.off if self.off else "on"),
        }
        if self.from_runs:
            stats["reused_from"] = dict(self.from_runs)
        return stats


def _file_sizes(paths: Any) -> Dict[str, int]:
    """The size of each file that exists: a stat on disk, one fresh listing per bucket folder."""
    sizes: Dict[str, int] = {}
    urls = []
    for path in set(paths):
        if is_url(path):
            urls.append(path)
            continue
        try:
            sizes[path] = os.stat(path).st_size
        except OSError:
            continue
    if urls:
        sizes.update(url_sizes(urls))
    return sizes
