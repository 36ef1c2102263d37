"""Pickling notes so that each tensor costs its own bytes: ``dumps``/``loads``, ``compact`` and
``tensor_bytes``."""

from __future__ import annotations

import pickle

import torch

from dagster_graphbook.store import codec as notes_codec

Pair = __import__("collections").namedtuple("Pair", "image label")


def test_compact_and_tensor_bytes_walk_the_same_containers():
    from collections import OrderedDict

    from dagster_graphbook.store.codec import compact, tensor_bytes

    batch = torch.zeros(8, 100)
    args = (OrderedDict(view=batch[0]), Pair(batch[1], 1), "x")
    out = compact(args)
    assert type(out[0]) is OrderedDict and type(out[1]) is Pair
    assert out[0]["view"].untyped_storage().nbytes() == 400
    assert out[1].image.untyped_storage().nbytes() == 400
    plain = (torch.zeros(3), [1, 2])
    assert compact(plain) is plain  # no view: the object itself
    shared = torch.zeros(10)
    assert tensor_bytes({"a": shared, "b": [shared, torch.zeros(5)]}) == 60
    assert tensor_bytes([torch.zeros(100)] * 1 + [torch.zeros(100)], limit=500) == 800
    nested = current = {}
    for _ in range(12):
        current["next"] = current = {}
    current["t"] = torch.zeros(10)  # deeper than the walk looks
    assert tensor_bytes(nested) == 0


def test_codec_stores_a_batch_view_as_its_own_bytes():
    import numpy as np
    import torch

    batch = torch.rand(8, 3, 64, 64)
    notes = [{"tensor": [batch[i]], "i": i} for i in range(8)]
    raw = 8 * batch[0].numel() * 4
    assert (
        len(pickle.dumps(notes[:1])) > 7 * raw / 8
    )  # what plain pickle does: the whole batch per view
    stored = notes_codec.dumps(notes)
    assert len(stored) <= 1.1 * raw
    back = notes_codec.loads(stored)
    assert all(torch.equal(b["tensor"][0], batch[i]) for i, b in enumerate(back))
    view = batch[2]
    shared = notes_codec.loads(notes_codec.dumps([view, view]))  # one object stays one object
    assert shared[0].data_ptr() == shared[1].data_ptr()
    array = np.zeros((8, 1000))
    assert len(notes_codec.dumps([array[1]])) < 1.1 * 8000


def test_meta_tensors_and_parameters_store_as_they_are():
    """A ``meta`` tensor (no data: a model built on ``device="meta"``) pickles as before; a
    Parameter on the CPU stays a Parameter (tests/gpu checks CUDA tensors come back on the CPU)."""
    import torch

    from dagster_graphbook.store import codec

    back = codec.loads(codec.dumps({"shape": torch.empty(3, 4, device="meta")}))
    assert back["shape"].device.type == "meta" and back["shape"].shape == (3, 4)
    layer = torch.nn.Linear(2, 2, device="meta")
    assert codec.loads(codec.dumps(layer)).weight.device.type == "meta"
    weight = torch.nn.Parameter(torch.ones(2))
    assert isinstance(codec.loads(codec.dumps({"w": weight}))["w"], torch.nn.Parameter)
