"""Device moves and tensor walks keep container types (namedtuple, OrderedDict, defaultdict,
``Note``)."""

from __future__ import annotations

import torch

Pair = __import__("collections").namedtuple("Pair", "image label")


def test_move_and_map_tensors_keep_container_types():
    from collections import OrderedDict, defaultdict

    from dagster_graphbook.authoring.note import Note
    from dagster_graphbook.execution.device import contains_cuda, map_tensors, move

    t = torch.ones(2)
    value = OrderedDict(
        a=Pair(t, [t, (t, "s")]),
        b=defaultdict(list, k=t),
        c=Note({"x": t}),
        d="text",
    )
    moved = move(value, "cpu")
    assert type(moved) is OrderedDict and list(moved) == ["a", "b", "c", "d"]
    assert type(moved["a"]) is Pair and type(moved["a"].label[1]) is tuple
    assert type(moved["b"]) is defaultdict and moved["b"].default_factory is list
    assert type(moved["c"]) is Note and moved["c"]["missing"] is None
    assert moved is value  # nothing moved: nothing copied
    doubled = map_tensors(lambda x: x * 2, value)
    assert doubled is not value and type(doubled["a"]) is Pair
    assert torch.equal(doubled["a"].image, t * 2) and torch.equal(doubled["c"]["x"], t * 2)
    assert doubled["d"] == "text" and value["a"].image is t  # the input is left as it was
    loop = [t]
    loop.append(loop)  # a list inside itself is not entered again
    assert map_tensors(lambda x: x + 1, loop)[1] is loop
    assert not contains_cuda(value)
