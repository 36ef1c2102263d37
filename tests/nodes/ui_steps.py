"""Nodes of tests/e2e/ui_cases.py (NODES)."""

import time

from graphbook import param, source, step
from graphbook.steps import BatchStep


@step("UI/Items")
@source()
@param("n", "number", default=12)
def items(ctx):
    for i in range(int(ctx.n)):
        yield {"out": {"i": i, "items": [i]}}


class Slow(BatchStep):
    """Loads one item per 0.2 s, so a run of 12 items reports progress lines."""

    RequiresInput = True
    Category = "UI"
    Outputs = ["out"]
    Parameters = {
        "batch_size": {"type": "number", "default": 2},
        "item_key": {"type": "string", "default": "items"},
    }

    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        time.sleep(0.2)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None


@step("UI/Score")
@param("score", "number", default=0.95)
def score(ctx, data):
    ctx.dagster_metadata = {"accuracy": ctx.score}


@step("UI/Where")
@source()
@param("record", "string", default="")
def where(ctx):
    """Writes how this step's process was started: its parent (the forkserver or the run's
    process) with that one's command line and parent, and the run's process (multiprocessing's
    parent of this one)."""
    import json
    import multiprocessing
    import os

    def stat(pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode()
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        return {"pid": pid, "cmdline": cmdline, "ppid": ppid}

    run = multiprocessing.parent_process()
    record = {
        "pid": os.getpid(),
        "run_pid": run.pid if run is not None else None,
        "parent": stat(os.getppid()),
    }
    with open(ctx.record, "w") as f:
        json.dump(record, f)
    yield {"out": {"i": 0, "items": [0]}}


@step("UI/After")
@param("marker", "string", default="")
def after(ctx, data):
    with open(ctx.marker, "a") as f:
        f.write(f"{data['i']}\n")
