"""Nodes of tests/defs/component/test_translation.py (FLAKY_NODES)."""

from pathlib import Path

from graphbook import param, source, step


@step("Flaky/Numbers")
@source()
def numbers(ctx):
    for i in range(3):
        yield {"out": {"i": i}}


@step("Flaky/Flaky")
@param("attempts_file", "string", default="")
def flaky(ctx, data):
    if data["i"] == 0:
        path = Path(ctx.attempts_file)
        with path.open("a") as f:
            f.write("attempt\n")
        if len(path.read_text().splitlines()) == 1:
            raise RuntimeError("first attempt fails")
    data["ok"] = True
