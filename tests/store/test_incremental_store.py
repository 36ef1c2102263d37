"""The store of incremental runs: packs written whole, the newest entry of a key wins, damaged
packs are reported, and pruning keeps what newer packs do not hold."""

from __future__ import annotations

import os
import time

from dagster_graphbook.store.incremental import (
    GRACE_S,
    RETENTION_DAYS,
    Entry,
    IncrementalStore,
    encode_outputs,
)


def _entry(value: int, run: str) -> Entry:
    return Entry(encode_outputs({"out": [{"x": value}]}), [], run)


def _age(store: IncrementalStore, seconds: float) -> None:
    for path in store.folder.iterdir():
        then = time.time() - seconds
        os.utime(path.path, (then, then))


def test_the_newest_entry_of_a_key_wins_and_old_packs_are_pruned(tmp_path):
    store = IncrementalStore(str(tmp_path), "wf", "Step", "2026-01-01")
    store.save({"a": _entry(1, "r1"), "b": _entry(2, "r1")}, "r1")
    _age(store, GRACE_S + 5)  # an older run's pack
    store.save({"a": _entry(10, "r2")}, "r2")
    entries, problems = IncrementalStore(str(tmp_path), "wf", "Step", "2026-01-01").load()
    assert problems == []
    assert {k: (e.notes(), e.run_id) for k, e in entries.items()} == {
        "a": ({"out": [{"x": 10}]}, "r2"),
        "b": ({"out": [{"x": 2}]}, "r1"),
    }
    # a run that reused a and b writes both: r1's pack is then superseded and past its grace
    reader = IncrementalStore(str(tmp_path), "wf", "Step", "2026-01-01")
    reader.load()
    reader.save({"a": entries["a"], "b": entries["b"]}, "r3")
    assert reader.prune(["a", "b"]) == 1
    assert sorted(p.name.split("-")[0] for p in reader.folder.iterdir()) == ["r2", "r3"]


def test_a_pack_past_the_retention_is_removed_and_a_fresh_superseded_one_kept(tmp_path):
    store = IncrementalStore(str(tmp_path), "wf", "Step", None)
    store.save({"a": _entry(1, "r1")}, "r1")
    _age(store, RETENTION_DAYS * 86400 + 5)
    store.save({"b": _entry(2, "r2")}, "r2")  # fresh, and all its keys in a newer pack below
    reader = IncrementalStore(str(tmp_path), "wf", "Step", None)
    reader.load()
    reader.save({"b": _entry(2, "r3")}, "r3")
    assert reader.prune(["b"]) == 1  # r1's (too old); r2's is superseded but within its grace
    assert sorted(p.name.split("-")[0] for p in reader.folder.iterdir()) == ["r2", "r3"]
    assert reader.partition.name == "_unpartitioned"


def test_a_damaged_pack_is_reported_and_the_others_read(tmp_path):
    store = IncrementalStore(str(tmp_path), "wf", "Step", "d")
    good = store.save({"a": _entry(1, "r1")}, "r1")
    bad = store.save({"b": _entry(2, "r2")}, "r2")
    bad.write_bytes(bad.read_bytes()[:20])
    entries, problems = IncrementalStore(str(tmp_path), "wf", "Step", "d").load()
    assert set(entries) == {"a"} and good.exists()
    assert len(problems) == 1 and str(bad) in problems[0] and "damaged" in problems[0]


def test_a_pack_is_written_whole_or_not_at_all(tmp_path):
    store = IncrementalStore(str(tmp_path), "wf", "Step", "d")

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("no")

    entry = Entry(b"x", [], "r1")
    entry.files = [Unpicklable()]  # type: ignore[list-item]
    try:
        store.save({"a": entry}, "r1")
    except Exception:
        pass
    assert [p.name for p in store.folder.iterdir()] == []


def test_packs_beyond_the_newest_64_of_a_version_go_after_their_grace(tmp_path, monkeypatch):
    """Notes whose keys change in every run leave packs nobody supersedes: the newest 64 stay."""
    from dagster_graphbook.store import incremental

    monkeypatch.setattr(incremental, "MAX_PACKS", 3)
    store = IncrementalStore(str(tmp_path), "wf", "Step", None)
    now = time.time()
    for i in range(5):
        path = store.save({f"k{i}": _entry(i, f"r{i}")}, f"r{i}")
        then = now - GRACE_S - 100 + 10 * i  # older runs older, all past their grace
        os.utime(path.path, (then, then))
    reader = IncrementalStore(str(tmp_path), "wf", "Step", None)
    reader.load()
    reader.save({"k9": _entry(9, "r9")}, "r9")
    assert reader.prune(["k9"]) == 3  # r0, r1, r2: beyond this run's and the 2 newest before it
    assert sorted(p.name.split("-")[0] for p in reader.folder.iterdir()) == ["r3", "r4", "r9"]
