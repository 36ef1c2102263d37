"""A step run split into reused and computed notes: what it reuses, what it records, and a
stream's memory bounded by writing its pack in parts."""

from __future__ import annotations

from typing import Any, List

from dagster_graphbook.execution.incremental import reuse as reuse_module
from dagster_graphbook.execution.incremental.reuse import Reuse
from dagster_graphbook.store.incremental import IncrementalStore


def _reuse(tmp_path: Any, run_id: str, said: List[str], refresh: bool = False) -> Reuse:
    store = IncrementalStore(str(tmp_path), "wf", "Step", None)
    return Reuse(
        store, "token", refresh=refresh, label="step", warn=said.append, info=said.append,
        run_id=run_id,
    )  # fmt: skip


def test_a_second_run_reuses_what_the_first_computed_and_refresh_reuses_nothing(tmp_path):
    said: List[str] = []
    notes = [{"x": i} for i in range(5)]
    first = _reuse(tmp_path, "r1", said)
    keys, hits = first.split(notes)
    assert hits == {} and len(set(keys)) == 5
    for key, note in zip(keys, notes):
        first.computed(key, {"out": [{**note, "y": 1}]}, None)
    first.finish()

    second = _reuse(tmp_path, "r2", said)
    keys, hits = second.split(notes + [{"x": 9}])
    assert sorted(hits) == [0, 1, 2, 3, 4] and hits[2] == {"out": [{"x": 2, "y": 1}]}
    second.finish()
    assert second.stats()["reused_from"] == {"r1": 5}

    fresh = _reuse(tmp_path, "r3", said, refresh=True)
    assert fresh.split(notes)[1] == {}
    assert fresh.stats()["incremental"] == "refresh"


def test_a_long_step_writes_its_pack_in_parts_and_keeps_every_note(tmp_path, monkeypatch):
    monkeypatch.setattr(reuse_module, "PACK_BYTES", 200)  # a few notes per pack
    said: List[str] = []
    notes = [{"x": i, "text": "a" * 50} for i in range(20)]
    run = _reuse(tmp_path, "r1", said)
    for chunk in (notes[:10], notes[10:]):  # a stream's chunks
        keys, _ = run.split(chunk)
        for key, note in zip(keys, chunk):
            run.computed(key, {"out": [note]}, None)
    assert len(run.packs) >= 3 and len(run.kept) < 20  # written as they grew
    run.finish()
    again = _reuse(tmp_path, "r2", said)
    assert sorted(again.split(notes)[1]) == list(range(20))


def test_a_recorded_file_gone_or_resized_is_a_miss(tmp_path):
    said: List[str] = []
    written = tmp_path / "out.png"
    written.write_bytes(b"12345")
    first = _reuse(tmp_path, "r1", said)
    (key,), _ = first.split([{"x": 1}])
    first.computed(key, {"out": [{"x": 1}]}, [(str(written), 5)])
    first.finish()
    assert sorted(_reuse(tmp_path, "r2", said).split([{"x": 1}])[1]) == [0]
    written.write_bytes(b"123")
    assert _reuse(tmp_path, "r3", said).split([{"x": 1}])[1] == {}
    written.unlink()
    assert _reuse(tmp_path, "r4", said).split([{"x": 1}])[1] == {}


def test_reused_notes_whose_dump_fn_named_no_file_are_said_unchecked(tmp_path):
    said: List[str] = []
    first = _reuse(tmp_path, "r1", said)
    keys, _ = first.split([{"x": 1}, {"x": 2}])
    first.computed(keys[0], {"out": [{"x": 1}]}, [])  # dump_fn ran, returned no path
    first.computed(keys[1], {"out": [{"x": 2}]}, None)  # no dump_fn
    first.finish()
    second = _reuse(tmp_path, "r2", said)
    assert sorted(second.split([{"x": 1}, {"x": 2}])[1]) == [0, 1]
    second.finish()
    (warned,) = [w for w in said if "not checked" in w]
    assert "1 reused notes had dump_fn calls that returned no path" in warned


def test_a_refresh_wins_over_a_run_that_overlapped_it_and_voids_what_it_did_not_see(tmp_path):
    said: List[str] = []
    notes = [{"x": i} for i in range(3)]

    def record(run: Reuse, value: str, chosen: List[int]) -> None:
        keys, _ = run.split(notes)
        for i in chosen:
            run.computed(keys[i], {"out": [{"v": value}]}, None)

    old = _reuse(tmp_path, "r0", said)
    record(old, "stale", [0, 1, 2])
    old.finish()
    overlapping = _reuse(tmp_path, "r1", said)
    assert len(overlapping.split(notes)[1]) == 3  # it reused the stale notes
    refresh = _reuse(tmp_path, "rf", said, refresh=True)
    record(refresh, "fresh", [0])  # a refresh fed one note of the three
    refresh.finish()
    overlapping.finish()  # it ends after the refresh: its pack is the newest
    after = _reuse(tmp_path, "r2", said)
    _, hits = after.split(notes)
    assert hits == {0: {"out": [{"v": "fresh"}]}}  # the others are computed again
