"""The keys of incremental runs: the same note gives the same key in any process, and each thing
that decides a note's outputs changes it (docs/incremental.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dagster_graphbook.execution.incremental.keys import (
    content_identity,
    note_keys,
    record_resource,
    resource_version,
    version_of,
)
from tests.conftest import REPO

NOTE_CODE = """
import sys, torch, numpy
from dagster_graphbook.execution.incremental.keys import note_keys
note = {"image": sys.argv[1], "t": torch.arange(6, dtype=torch.float16).reshape(2, 3),
        "a": numpy.ones(3), "n": [1, 2.5, None, True, {"k": "v"}], "s": {3, 1, 2}}
print(note_keys("token", [note])[0])
"""


def test_a_notes_key_is_the_same_in_every_process(tmp_path):
    """Tensors, arrays, sets and nested values give the same key in fresh processes (each with
    its own hash seed)."""
    image = tmp_path / "a.png"
    image.write_bytes(b"png")
    keys = {
        subprocess.run(
            [sys.executable, "-c", NOTE_CODE, str(image)],
            capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }  # fmt: skip
    assert len(keys) == 1 and len(keys.pop()) == 64


def test_each_part_of_a_note_changes_its_key(tmp_path):
    image = tmp_path / "day" / "a.png"
    image.parent.mkdir()
    image.write_bytes(b"one")
    note = {"image": str(image), "t": torch.zeros(3)}
    key = note_keys("token", [note])[0]
    assert note_keys("token", [dict(note)])[0] == key
    assert note_keys("other token", [note])[0] != key
    assert note_keys("token", [{**note, "t": torch.ones(3)}])[0] != key
    assert note_keys("token", [{**note, "t": torch.zeros(3, dtype=torch.float64)}])[0] != key
    time.sleep(0.01)
    image.write_bytes(b"two")  # the file replaced under the same name
    assert note_keys("token", [note])[0] != key


def test_bare_words_are_values_whatever_the_current_folder_holds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = note_keys("token", [{"label": "circle"}])[0]
    Path("circle").write_text("a file of that name")
    assert note_keys("token", [{"label": "circle"}])[0] == before


def test_a_note_with_a_value_that_cannot_be_pickled_is_never_reused():
    import threading

    assert note_keys("token", [{"lock": threading.Lock()}, {"x": 1}])[0] is None


def test_a_resources_version_follows_the_contents_of_the_files_it_names(tmp_path):
    class Model:  # a resource class: its code is part of its version
        pass

    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"weights one")
    first = version_of(Model, {"checkpoint": str(checkpoint), "device": "cpu"}, {})
    stat = checkpoint.stat()
    checkpoint.write_bytes(b"weights two")  # retrained: same size, same mtime
    os.utime(checkpoint, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert content_identity(str(checkpoint)) is not None
    assert version_of(Model, {"checkpoint": str(checkpoint), "device": "cpu"}, {}) != first
    second = version_of(Model, {"checkpoint": str(checkpoint), "device": "cpu"}, {})
    assert version_of(Model, {"checkpoint": str(checkpoint), "device": "cuda"}, {}) != second


def test_a_resource_bound_to_another_takes_its_version_and_an_unknown_one_is_no_key():
    class Tokenizer:
        pass

    record_resource("run-1", "tok", lambda: "v1")
    assert resource_version("run-1", "tok") == "v1"
    assert resource_version("run-2", "tok") is None  # another run's
    with_v1 = version_of(Tokenizer, {}, {"model": "v1"})
    assert version_of(Tokenizer, {}, {"model": "v2"}) != with_v1
    from dagster_graphbook.execution.incremental.keys import Unkeyable

    with pytest.raises(Unkeyable):
        version_of(Tokenizer, {}, {"model": None})
