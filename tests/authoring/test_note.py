"""`Note`: Graphbook's old note type, a dict whose missing keys read as None."""

from __future__ import annotations

from dagster_graphbook.authoring import Note


def test_note_missing_key_is_none():
    n = Note({"a": 1})
    assert n["a"] == 1
    assert n["missing"] is None
    assert "missing" not in n
    assert n.get("missing", "d") == "d"
    n["b"] = 2
    assert dict(n) == {"a": 1, "b": 2}
    assert isinstance(n, dict)
    assert Note()["x"] is None
