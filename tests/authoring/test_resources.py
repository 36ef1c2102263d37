"""Graphbook's resource classes: a step receives ``value()``."""

from __future__ import annotations

import dagster_graphbook.authoring as gb
from dagster_graphbook.authoring.resources import Resource


def test_builtin_resources():
    assert gb.resources.NumberResource(val="2.5").value() == 2.5
    assert (
        gb.resources.FunctionResource(val="def f(x):\n    return x").value()
        == "def f(x):\n    return x"
    )
    assert gb.resources.ListResource(val=("a", "b")).value() == ["a", "b"]
    assert gb.resources.DictResource(val=[("k", 1)]).value() == {"k": 1}
    assert Resource(val="text").value() == "text"
