"""Graphbook's step classes: the ``Step.__call__`` lifecycle, route results and the built-in
steps."""

from __future__ import annotations

import json

import pytest

from dagster_graphbook.authoring.steps import Copy, DumpJSONL, LoadJSONL, Split, Step

# ---------------------------------------------------------------------------------------------
# Step.__call__ lifecycle and route results


class _Traced(Step):
    def __init__(self, item_key=None, route_to="out"):
        super().__init__(item_key=item_key)
        self.calls = []
        self.route_to = route_to

    def on_data(self, data):
        self.calls.append(("on_data", data["id"]))

    def on_item(self, item, data):
        self.calls.append(("on_item", item))

    def on_after_item(self, data):
        self.calls.append(("on_after_item", data["id"]))

    def route(self, data):
        self.calls.append(("route", data["id"]))
        return self.route_to


def test_call_lifecycle_order_with_item_key():
    s = _Traced(item_key="items")
    note = {"id": 1, "items": [1, 2, 3]}
    assert s(note) == {"out": [note]}
    # on_item is called once, with the whole value
    assert s.calls == [("on_data", 1), ("on_item", [1, 2, 3]), ("on_after_item", 1), ("route", 1)]


def test_call_lifecycle_without_item_key_skips_on_item():
    s = _Traced()
    s({"id": 2})
    assert s.calls == [("on_data", 2), ("on_after_item", 2), ("route", 2)]


def test_call_missing_item_key_raises():
    with pytest.raises(KeyError, match="items"):
        _Traced(item_key="items")({"id": 3})


@pytest.mark.parametrize(
    "route_to,expected",
    [
        ("B", lambda n: {"B": [n]}),
        ({"A": "NOTE", "B": ["x", "y"]}, lambda n: {"A": ["NOTE"], "B": ["x", "y"]}),
        (None, lambda n: {}),
    ],
)
def test_route_results(route_to, expected):
    note = {"id": 4}
    assert _Traced(route_to=route_to)(note) == expected(note)


def test_all_merges_outputs():
    s = _Traced(route_to="out")
    out = s.all([{"id": 1}, {"id": 2}])
    assert out == {"out": [{"id": 1}, {"id": 2}]}


# ---------------------------------------------------------------------------------------------
# Built-in steps


def test_split_routes_on_function_string():
    s = Split("def big(d):\n    return d['x'] > 1\n")
    assert s({"x": 2}) == {"A": [{"x": 2}]}
    assert s({"x": 0}) == {"B": [{"x": 0}]}
    assert Split.Outputs == ["A", "B"]


def test_copy_deep_copies_to_b():
    note = {"nested": {"values": [1, 2]}}
    out = Copy()(note)
    assert out["A"][0] is note
    b = out["B"][0]
    assert b == note and b is not note
    b["nested"]["values"].append(3)
    assert note["nested"]["values"] == [1, 2]


def test_load_jsonl(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": 3}\n')
    assert LoadJSONL(str(path))() == {"out": [{"a": 1}, {"a": 2}, {"a": 3}]}
    assert LoadJSONL(str(path), start_from=1)() == {"out": [{"a": 2}, {"a": 3}]}


def _dump_run(path, notes):
    d = DumpJSONL(str(path))
    d.on_start()
    for n in notes:
        assert d(n) == {"out": [n]}
    return d


def test_dump_jsonl_atomic_and_no_duplicates_on_rerun(tmp_path):
    path = tmp_path / "sub" / "out.jsonl"
    first = _dump_run(path, [{"a": 1}, {"a": 2}])
    assert not path.exists()  # nothing under the final name until on_end
    first.on_end()
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"a": 1}, {"a": 2}]

    second = _dump_run(path, [{"b": 1}, {"b": 2}, {"b": 3}])
    # while the second run writes, readers still see the first run's complete file
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"a": 1}, {"a": 2}]
    second.on_end()
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"b": 1}, {"b": 2}, {"b": 3}]
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.jsonl"]  # no temp files left

    third = _dump_run(path, [{"b": 1}, {"b": 2}, {"b": 3}])
    third.on_end()
    assert len(path.read_text().splitlines()) == 3  # same notes again: not appended
