"""`log()`: Graphbook's logging call, routed to the running step's target."""

from __future__ import annotations

import json

import pytest

import dagster_graphbook.authoring as gb
from dagster_graphbook.authoring.log import LogTarget, log_target


def test_log_routes_to_target_and_rejects_unknown_types():
    lines = []
    with log_target(LogTarget("7", "Logger", lambda level, msg: lines.append((level, msg)))):
        gb.log("hello")
        gb.log("bad", "error")
        gb.log({"a": [1, b"xyz"]}, "json")
        with pytest.raises(ValueError):
            gb.log("x", "nonsense")
    assert lines[0] == ("info", "hello")
    assert lines[1] == ("error", "bad")
    assert lines[2][0] == "info" and json.loads(lines[2][1]) == {"a": [1, "(bytes of length 3)"]}
    with pytest.raises(ValueError):
        gb.log("outside a run")
