"""The keys of incremental runs: the same note gives the same key in any process, and each thing
that decides a note's outputs changes it (docs/incremental.md)."""

from __future__ import annotations

import dataclasses
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
from tests.support.paths import REPO

NOTE_CODE = """
import sys, torch, numpy
from dagster_graphbook.execution.incremental.keys import note_keys
note = {"image": sys.argv[1], "t": torch.arange(6, dtype=torch.float16).reshape(2, 3),
        "a": numpy.ones(3), "n": [1, 2.5, None, True, {"k": "v"}], "s": {"a/x", "b/y", "c", "d"}}
print(note_keys("token", [note])[0][0])
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
    key = note_keys("token", [note])[0][0]
    assert note_keys("token", [dict(note)])[0][0] == key
    assert note_keys("other token", [note])[0][0] != key
    assert note_keys("token", [{**note, "t": torch.ones(3)}])[0][0] != key
    assert note_keys("token", [{**note, "t": torch.zeros(3, dtype=torch.float64)}])[0][0] != key
    time.sleep(0.01)
    image.write_bytes(b"two")  # the file replaced under the same name
    assert note_keys("token", [note])[0][0] != key


def test_bare_words_are_values_whatever_the_current_folder_holds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = note_keys("token", [{"label": "circle"}])[0][0]
    Path("circle").write_text("a file of that name")
    assert note_keys("token", [{"label": "circle"}])[0][0] == before


def test_a_note_with_a_value_that_cannot_be_pickled_is_never_reused():
    import threading

    assert note_keys("token", [{"lock": threading.Lock()}, {"x": 1}])[0][0] is None


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


@dataclasses.dataclass
class Item:
    """A value that is no dict or list: keyed by its pickle."""

    where: str


def _replace(path: Path, data: bytes) -> None:
    time.sleep(0.01)
    path.write_bytes(data)


def test_a_file_named_as_a_path_a_set_an_array_or_inside_an_object_is_seen(tmp_path):
    import numpy as np

    image = tmp_path / "day" / "a.png"
    image.parent.mkdir()
    image.write_bytes(b"one")
    forms = [
        {"p": image},  # a Path
        {"p": {str(image), "other/b.png"}},  # a set of paths
        {"p": np.array([str(image)])},  # an array of strings
        {"p": Item(str(image))},  # inside an object, by its pickle
        {"p": [[[[[[[[[[str(image)]]]]]]]]]]},  # deep
    ]
    before = note_keys("token", forms)[0]
    assert None not in before
    _replace(image, b"two")
    after = note_keys("token", forms)[0]
    assert [a != b for a, b in zip(after, before)] == [True] * len(forms)


def test_what_cannot_be_keyed_for_sure_is_computed_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    notes = [
        {"url": "https://example.invalid/laion/0.jpg"},  # a value: never listed
        {"q": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)},
        {"s": torch.ones(2).to_sparse()},
        {"obj": s3_object()},
    ]
    keys, why = note_keys("token", notes)
    assert keys[0] is not None and keys[1:] == [None, None, None]
    assert any("quantized or not strided" in w for w in why), why
    assert any("s3://bucket-x/day/0.png cannot be listed" in w for w in why), why


def s3_object() -> str:
    return "s3://bucket-x/day/0.png"


def test_parameters_naming_folders_lists_and_project_relative_files_are_seen(tmp_path):
    class Step:
        pass

    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    weights = project / "models" / "w.bin"
    weights.write_bytes(b"v1")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    listed = tmp_path / "labels.csv"
    listed.write_text("a")
    params = {"checkpoint": "models/w.bin", "model_dir": str(folder), "files": [str(listed)]}

    def version() -> str:  # as a resource's (a step's folders are where it writes, mostly)
        return version_of(Step, params, {}, [str(project)], resource=True)

    first = version()  # the relative path found in the project
    _replace(weights, b"v2")
    second = version()
    as_a_step = version_of(Step, params, {}, [str(project)])
    _replace(folder / "config.json", b'{"a": 1}')
    third = version()
    assert version_of(Step, params, {}, [str(project)]) == as_a_step  # its folder not looked into
    _replace(listed, b"b")
    assert len({first, second, third, version()}) == 4


def test_a_resource_file_changed_after_the_resource_was_built_is_unkeyed(tmp_path):
    from dagster_graphbook.execution.incremental.keys import Unkeyable, named_paths, stamps

    class Model:
        pass

    checkpoint = tmp_path / "m.pt"
    checkpoint.write_bytes(b"v1")
    params = {"checkpoint": str(checkpoint)}
    stamped = stamps(named_paths(params, []))  # when the resource was built
    assert version_of(Model, params, {}, [], stamped)
    _replace(checkpoint, b"v2")  # while the run used v1
    with pytest.raises(Unkeyable, match="changed after the resource was built"):
        version_of(Model, params, {}, [], stamped)


def test_a_class_without_source_is_unkeyed():
    from dagster_graphbook.execution.incremental.keys import Unkeyable

    namespace: dict = {}
    exec("class Made:\n    pass\n", namespace)
    with pytest.raises(Unkeyable, match="source of Made cannot be found"):
        version_of(namespace["Made"], {}, {})
