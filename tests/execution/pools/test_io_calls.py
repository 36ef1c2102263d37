"""Calls on bucket URLs, many at once (``runtime.io_concurrency``): a batch step's ``load_fn``
and ``dump_fn`` calls on URLs overlap far beyond the workers, local paths keep one call at a
time per worker, and an error of a bucket call that does not name its URL gets it. Timed calls
(each sleeps 0.2 s and records when it ran); the bucket itself is ``memory://`` (a URL fsspec
serves in the process: the workers are forked with its objects)."""

from __future__ import annotations

import json
import os
import time

import pytest

from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.execution.errors import named_url, url_named
from dagster_graphbook.execution.pools.io_calls import on_urls, share
from tests.execution.pools.pool_steps import batch_runtime

CALL_S = 0.2


def _most_at_once(spans):
    """The most calls that ran at the same moment, of (start, end) spans."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


class Timed(BatchStep):
    """load_fn and dump_fn each sleep CALL_S and record when they ran (dump_fn in a file of
    ``folder``, load_fn as its value)."""

    def __init__(self, folder):
        super().__init__(16, "items")
        self.folder = folder
        self.spans = []

    @staticmethod
    def load_fn(item):
        start = time.monotonic()
        time.sleep(CALL_S)
        return (start, time.monotonic())

    def on_item_batch(self, outputs, items, notes):
        self.spans += list(outputs)
        return [(item, os.path.join(self.folder, f"{n}.json")) for n, item in enumerate(items)]

    @staticmethod
    def dump_fn(item, record):
        start = time.monotonic()
        time.sleep(CALL_S)
        with open(f"{record}.{os.getpid()}.{start}", "w") as f:
            json.dump([start, time.monotonic()], f)


def _dump_spans(folder):
    return [json.loads(p.read_text()) for p in folder.iterdir()]


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_calls_on_urls_overlap_beyond_the_workers_and_local_ones_do_not(tmp_path, worker_type):
    """32 items on URLs, 2 workers, io_concurrency 16: each call sleeps 0.2 s; at least 12 of
    the loads and of the dumps run at once (16 at most), every item loaded and dumped once. Items
    that are local paths: at most 2 at once, as before."""
    runtime = batch_runtime(num_workers=2, worker_type=worker_type, io_concurrency=16)
    for items, least, most in (
        ([f"memory://bucket/{i}.png" for i in range(32)], 12, 16),
        ([str(tmp_path / f"{i}.png") for i in range(8)], 1, 2),
    ):
        folder = tmp_path / f"dumps-{least}"
        folder.mkdir()
        step = Timed(str(folder))
        run_batch_step(step, [{"items": items}], runtime)
        loads, dumps = step.spans, _dump_spans(folder)
        assert len(loads) == len(dumps) == len(items)
        assert least <= _most_at_once(loads) <= most, (items[0], _most_at_once(loads))
        assert least <= _most_at_once(dumps) <= most, (items[0], _most_at_once(dumps))


def test_one_at_a_time_under_a_call_timeout(tmp_path):
    """runtime.call_timeout_s needs the worker's main thread: calls on URLs go one at a time."""
    runtime = batch_runtime(num_workers=2, io_concurrency=16, call_timeout_s=30.0)
    step = Timed(str(tmp_path))
    run_batch_step(step, [{"items": [f"memory://bucket/{i}" for i in range(8)]}], runtime)
    assert _most_at_once(step.spans) <= 2
    assert _most_at_once(_dump_spans(tmp_path)) <= 2


def test_what_counts_as_a_url_and_each_workers_share():
    assert on_urls(("s3://bucket/a.png", 48)) and on_urls(["gs://b/k"])
    assert not on_urls(("/data/a.png", "file:///data/a.png", 3, None))
    assert share(32, 2) == 16 and share(32, 3) == 11 and share(32, 0) == 32 and share(1, 8) == 1


def test_a_bucket_error_that_does_not_name_its_url_gets_it():
    """s3fs's error for wrong credentials names no object; the URL is read from the failed
    call's frames. An error that names it already is left as it is."""
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    class Refusing(MemoryFileSystem):
        protocol = "refusing"

        def cat_file(self, path, start=None, end=None, **kwargs):
            raise PermissionError("The AWS Access Key Id you provided does not exist")

    fs = Refusing(skip_instance_cache=True)
    with pytest.raises(PermissionError) as caught:
        fs.cat_file("bucket/in/a.png", start=0)
    assert named_url(caught.value) == " (at refusing://bucket/in/a.png)"
    tb = url_named("Traceback ...\nPermissionError: The AWS ... exist\n", caught.value)
    assert (
        tb.splitlines()[-1] == "PermissionError: The AWS ... exist (at refusing://bucket/in/a.png)"
    )

    with pytest.raises(FileNotFoundError) as missing:
        fsspec.filesystem("memory").cat_file("/no-such/key")
    assert named_url(missing.value) == ""  # memory's error names the path already
    assert named_url(ValueError("no filesystem call")) == ""
