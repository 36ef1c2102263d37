"""Nodes of tests/e2e/test_cli_errors.py (NODES)."""

import json
import os

from graphbook import param, source, step


@step("Images")
@source()
@param("amount", "number", default=5)
def images(ctx):
    for i in range(int(ctx.amount)):
        yield {"out": {"path": f"img{i}.png", "score": i / 10}}


@step("SplitByScore")
@param("threshold", "number", default=0.3)
@param("runs", "int", default=1)
def split_by_score(ctx, data):
    if data["path"] == "img3.png" and ctx.threshold < -1:
        json.loads(data["path"])  # raises in the standard library
    if data["path"] == "img3.png" and ctx.threshold < 0:
        raise ValueError(f"cannot score {data['path']}")


@step("DayImages")
@source()
@param("folder", "string", default="data")
@param("pick", "function", default="def pick(name):\n    return f'{partition_key}' or name\n")
def day_images(ctx):
    for name in sorted(os.listdir(ctx.folder)):
        yield {"out": {"path": os.path.join(ctx.folder, name)}}
