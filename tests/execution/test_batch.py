"""The batch driver (loader pool -> on_item_batch -> dump pool -> release) and batch steps in
workflows."""

from __future__ import annotations

import csv
import os
import random
import time

import dagster as dg
import pytest
import torch

from dagster_graphbook.authoring import batch, param, step
from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.execution.errors import GpuOutOfMemory, StepFailure
from dagster_graphbook.execution.step.driver import run_step
from dagster_graphbook.plan.settings import BatchRuntime
from tests.support.workflows import edge, step_node, write_workflow

CPU0 = dict(num_workers=0, device="cpu")


def settings(**kw):
    return BatchRuntime(**{**CPU0, **kw})


# ---------------------------------------------------------------------------------------------
# Steps used by the driver tests (module level: forked workers inherit them)


class Recorder(BatchStep):
    """load_fn multiplies by 10; each batch is recorded; outputs are appended to their note."""

    def __init__(self, batch_size=3, item_key="items"):
        super().__init__(batch_size, item_key)
        self.batches = []
        self.routed = []

    @staticmethod
    def load_fn(item):
        return item * 10

    def on_item_batch(self, outputs, items, notes):
        self.batches.append((list(outputs), list(items), [n["id"] for n in notes]))
        for out, note in zip(outputs, notes):
            note.setdefault("loaded", []).append(out)
        return None

    def route(self, data):
        self.routed.append(data["id"])
        return "out"


class SlowRecorder(Recorder):
    """Random per-item delays, so completion order differs from input order."""

    @staticmethod
    def load_fn(item):
        time.sleep(random.random() * 0.01)
        return item * 10


class SyncStep(BatchStep):
    """No load_fn: Graphbook's sync path, outputs is None."""

    def __init__(self, batch_size=3, item_key="items"):
        super().__init__(batch_size, item_key)
        self.batches = []

    def on_item_batch(self, outputs, items, notes):
        self.batches.append((outputs, list(items), [n["id"] for n in notes]))
        return None


def ctx_load(ctx, item, **params):
    return {
        "ctx_type": type(ctx).__name__,
        "tag": ctx.tag,
        "item": item,
        "same": ctx is ctx.me,
        "pid": os.getpid(),
        "params": params,
    }


@step("Test/PlainLoad")
@batch(2, "items", load_fn=ctx_load)
@param("tag", "string", default="t")
def plain_load(ctx, outputs, items, notes):
    for out, note in zip(outputs, notes):
        note.setdefault("got", []).append(out)


class StaticLoad(BatchStep):
    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item, **params):
        return ("static", item, params)

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note.setdefault("got", []).append(out)


class MethodLoad(StaticLoad):
    def __init__(self, batch_size=2, item_key="items", offset=100):
        super().__init__(batch_size, item_key)
        self.offset = offset

    def load_fn(self, item):
        return item + self.offset


class ParamsLoad(StaticLoad):
    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)
        self.load_fn_params = {"scale": 3}


class InstanceLoad(BatchStep):
    """A load_fn assigned on the instance (Graphbook checks ``self.load_fn !=
    BatchStep.load_fn``)."""

    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)
        self.load_fn = lambda item: ("instance", item)

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note.setdefault("got", []).append(out)


def plain_dump(ctx, path, text):
    assert isinstance(ctx, BatchStep)
    with open(path, "w") as f:
        f.write(f"{ctx.prefix}{text}")
    return path


@step("Test/PlainDump")
@batch(2, "names", load_fn=lambda ctx, item: item.upper(), dump_fn=plain_dump)
@param("out_dir", "string")
@param("prefix", "string", default=">")
def plain_dump_step(ctx, outputs, items, notes):
    return [(os.path.join(ctx.out_dir, f"{item}.txt"), out) for out, item in zip(outputs, items)]


class StaticDump(BatchStep):
    def __init__(self, out_dir, batch_size=2, item_key="names"):
        super().__init__(batch_size, item_key)
        self.out_dir = out_dir

    @staticmethod
    def load_fn(item):
        return item.upper()

    @staticmethod
    def dump_fn(path, text):
        time.sleep(0.02)  # a slow writer: the note must still wait for it
        with open(path, "w") as f:
            f.write(text)

    def on_item_batch(self, outputs, items, notes):
        return [
            (os.path.join(self.out_dir, f"{item}.txt"), out) for out, item in zip(outputs, items)
        ]

    def route(self, note):
        note["files_present_at_route"] = all(
            os.path.exists(os.path.join(self.out_dir, f"{n}.txt")) for n in note["names"]
        )
        return "out"


def flaky_load(ctx, item):
    if item == "bad":
        raise ValueError(f"cannot load {item}")
    return item


@step("Test/Flaky")
@batch(2, "items", load_fn=flaky_load)
def flaky(ctx, outputs, items, notes):
    for out, note in zip(outputs, notes):
        note.setdefault("got", []).append(out)


class WrongCount(StaticLoad):
    @staticmethod
    def dump_fn(*args):
        pass

    def on_item_batch(self, outputs, items, notes):
        return [("only one",)]


class DumpsWithoutDumpFn(StaticLoad):
    def on_item_batch(self, outputs, items, notes):
        return [(o,) for o in outputs]


class BatchRaises(StaticLoad):
    def on_item_batch(self, outputs, items, notes):
        if any(item == 3 for item in items):
            raise RuntimeError("model exploded")
        for item, note in zip(items, notes):
            note.setdefault("got", []).append(item)


class TensorLoad(StaticLoad):
    @staticmethod
    def load_fn(item):
        return torch.full((2, 2), float(item))

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note.setdefault("sums", []).append(float(out.sum()))


class EndTracker(Recorder):
    ended = []

    def on_end(self):
        EndTracker.ended.append(self)


def run(step_obj, notes, **kw):
    return run_batch_step(step_obj, notes, settings(**kw), label="workflow 'w', step 'S' (node 9)")


# the same batching through each kind of loader: in the step, 2 worker processes, 2 threads
POOLS = pytest.mark.parametrize(
    "pool",
    [
        dict(num_workers=0),
        dict(num_workers=2, worker_type="process"),
        dict(num_workers=2, worker_type="thread"),
    ],
    ids=["in-step", "processes", "threads"],
)


# ---------------------------------------------------------------------------------------------
# Batching and release order


@POOLS
def test_batches_cross_note_boundaries(pool):
    s = Recorder(batch_size=3)
    notes = [{"id": 0, "items": [1, 2, 3, 4]}, {"id": 1, "items": [5, 6, 7, 8, 9]}]
    result = run(s, notes, **pool)
    assert s.batches == [
        ([10, 20, 30], [1, 2, 3], [0, 0, 0]),
        ([40, 50, 60], [4, 5, 6], [0, 1, 1]),
        ([70, 80, 90], [7, 8, 9], [1, 1, 1]),
    ]
    assert result.outputs == {"out": notes}
    assert notes[0]["loaded"] == [10, 20, 30, 40] and notes[1]["loaded"] == [50, 60, 70, 80, 90]
    assert (
        result.stats["batches"] == 3 and result.stats["items"] == 9 and result.stats["notes"] == 2
    )


@POOLS
def test_last_partial_batch_and_batch_size_one(pool):
    s = Recorder(batch_size=4)
    run(s, [{"id": 0, "items": list(range(6))}], **pool)
    assert [len(b[0]) for b in s.batches] == [4, 2]
    s1 = Recorder(batch_size=1)
    run(s1, [{"id": 0, "items": [1, 2]}, {"id": 1, "items": [3]}], **pool)
    assert [b[1] for b in s1.batches] == [[1], [2], [3]]


@POOLS
def test_notes_with_zero_one_many_items_released_in_order(pool):
    s = Recorder(batch_size=2)
    notes = [
        {"id": "a", "items": []},
        {"id": "b", "items": [1]},
        {"id": "c", "items": []},
        {"id": "d", "items": [2, 3, 4]},
        {"id": "e", "items": []},
    ]
    result = run(s, notes, **pool)
    assert [n["id"] for n in result.outputs["out"]] == ["a", "b", "c", "d", "e"]
    assert s.routed == ["a", "b", "c", "d", "e"]
    assert "loaded" not in notes[0] and "loaded" not in notes[2]
    assert notes[1]["loaded"] == [10] and notes[3]["loaded"] == [20, 30, 40]
    assert [b[1] for b in s.batches] == [[1, 2], [3, 4]]


def test_only_empty_notes():
    s = Recorder(batch_size=2)
    result = run(s, [{"id": 0, "items": []}, {"id": 1, "items": []}])
    assert [n["id"] for n in result.outputs["out"]] == [0, 1]
    assert s.batches == []


def test_no_notes():
    result = run(Recorder(), [])
    assert result.outputs == {"out": []}


@POOLS
def test_scalar_and_dict_items(pool):
    s = Recorder(batch_size=8)
    notes = [{"id": 0, "items": 5}, {"id": 1, "items": [6]}]
    run(s, notes, **pool)
    assert s.batches == [([50, 60], [5, 6], [0, 1])]

    d = SyncStep(batch_size=8)
    item = {"type": "image", "value": "/x.png"}
    run(d, [{"id": 0, "items": item}, {"id": 1, "items": [item, item]}], **pool)
    assert d.batches == [(None, [item, item, item], [0, 1, 1])]  # raw elements, a dict is one item


def test_missing_item_key_fails_naming_the_note():
    with pytest.raises(StepFailure) as info:
        run(Recorder(), [{"id": 0, "items": [1]}, {"id": 1, "other": 2}])
    assert "note 1" in str(info.value) and "'items'" in str(info.value)


def test_item_order_kept_with_several_process_workers():
    s = SlowRecorder(batch_size=2)
    notes = [{"id": i, "items": list(range(i * 10, i * 10 + i % 4))} for i in range(8)]
    result = run(s, notes, num_workers=2, prefetch=2)
    assert [n["id"] for n in result.outputs["out"]] == list(range(8))
    for note in notes:
        assert note.get("loaded", []) == [x * 10 for x in note["items"]]
    flat = [x for b in s.batches for x in b[1]]
    assert flat == [x for n in notes for x in n["items"]]


def test_process_and_thread_pools_give_identical_outputs():
    def make_notes():
        return [{"id": i, "items": list(range(i))} for i in range(6)]

    outs = {}
    for worker_type in ("process", "thread"):
        s = SlowRecorder(batch_size=3)
        result = run(s, make_notes(), num_workers=2, worker_type=worker_type)
        outs[worker_type] = (result.outputs, s.batches)
    outs["in-step"] = (run(SlowRecorder(batch_size=3), make_notes()).outputs, None)
    assert outs["process"] == outs["thread"]
    assert outs["process"][0] == outs["in-step"][0]


def _batch_in_daemon(queue):
    logs = []
    result = run_batch_step(
        Recorder(batch_size=3),
        [{"id": i, "items": list(range(i))} for i in range(4)],
        settings(num_workers=2, worker_type="process"),
        label="workflow 'w', step 'S' (node 9)",
        emit=lambda level, msg: logs.append((level, msg)),
    )
    queue.put((result.outputs, result.stats["worker_type"], logs))


def test_daemonic_step_process_falls_back_to_threads():
    """Dask and Celery prefork workers are daemonic: a process pool there would fail to start."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_batch_in_daemon, args=(queue,), daemon=True)
    proc.start()
    outputs, worker_type, logs = queue.get(timeout=60)
    proc.join(10)
    assert proc.exitcode == 0
    assert worker_type == "thread"
    assert [n["loaded"] for n in outputs["out"] if n["items"]] == [[0], [0, 10], [0, 10, 20]]
    assert [n["id"] for n in outputs["out"]] == [0, 1, 2, 3]
    assert any(
        level == "warning" and "daemonic" in msg and "step 'S'" in msg for level, msg in logs
    )


def test_tensors_are_passed_as_a_list():
    s = TensorLoad(batch_size=3)
    notes = [{"id": 0, "items": [1, 2, 3, 4]}]
    run(s, notes, num_workers=1)
    assert notes[0]["sums"] == [4.0, 8.0, 12.0, 16.0]


# ---------------------------------------------------------------------------------------------
# load_fn calling conventions


def test_plain_load_fn_from_decorator_gets_ctx_in_step_process():
    s = plain_load(tag="T")
    s.me = s
    notes = [{"items": [1, 2, 3]}]
    run(s, notes)
    got = notes[0]["got"]
    assert [g["item"] for g in got] == [1, 2, 3]
    assert all(
        g["same"] and g["tag"] == "T" and g["ctx_type"] == "PlainLoad" and g["params"] == {}
        for g in got
    )
    assert got[0]["pid"] == os.getpid()


def test_plain_load_fn_gets_ctx_copy_in_worker_process():
    s = plain_load(tag="W")
    s.me = s
    notes = [{"items": [1, 2, 3]}]
    run(s, notes, num_workers=2)
    got = notes[0]["got"]
    assert [g["item"] for g in got] == [1, 2, 3]
    assert all(g["tag"] == "W" and g["ctx_type"] == "PlainLoad" for g in got)
    assert all(g["pid"] != os.getpid() for g in got)


def test_staticmethod_load_fn_gets_item_only():
    notes = [{"items": ["x", "y"]}]
    run(StaticLoad(), notes)
    assert notes[0]["got"] == [("static", "x", {}), ("static", "y", {})]


def test_method_load_fn_is_bound():
    notes = [{"items": [1, 2]}]
    run(MethodLoad(offset=5), notes, num_workers=1)
    assert notes[0]["got"] == [6, 7]


def test_load_fn_params_are_passed_as_kwargs():
    notes = [{"items": [1]}]
    run(ParamsLoad(), notes)
    assert notes[0]["got"] == [("static", 1, {"scale": 3})]


def test_load_fn_assigned_on_the_instance_is_used():
    notes = [{"items": [1, 2]}]
    run(InstanceLoad(), notes)
    assert notes[0]["got"] == [("instance", 1), ("instance", 2)]


# ---------------------------------------------------------------------------------------------
# Sync path (no load_fn)


def test_sync_batch_step_flushes_last_partial_batch():
    s = SyncStep(batch_size=3)
    notes = [{"id": 0, "items": [1, 2]}, {"id": 1, "items": [3, 4]}]
    result = run(s, notes, num_workers=2)
    assert s.batches == [(None, [1, 2, 3], [0, 0, 1]), (None, [4], [1])]
    assert [n["id"] for n in result.outputs["out"]] == [0, 1]


# ---------------------------------------------------------------------------------------------
# dump_fn conventions, files, release after dumps


@pytest.mark.parametrize("num_workers", [0, 2])
def test_plain_dump_fn_gets_ctx_and_tuple(tmp_path, num_workers):
    s = plain_dump_step(out_dir=str(tmp_path), prefix="#")
    notes = [{"names": ["a", "b", "c"]}, {"names": "d"}]
    result = run(s, notes, num_workers=num_workers)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt", "c.txt", "d.txt"]
    assert (tmp_path / "b.txt").read_text() == "#B"
    assert (tmp_path / "d.txt").read_text() == "#D"
    assert sorted(os.path.basename(p) for p, _ in result.files) == [
        "a.txt",
        "b.txt",
        "c.txt",
        "d.txt",
    ]
    assert all(size == 2 for _, size in result.files)
    assert result.stats["dumps"] == 4
    assert result.outputs["out"] == notes


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_staticmethod_dump_fn_and_note_released_after_its_dumps(tmp_path, worker_type):
    s = StaticDump(str(tmp_path), batch_size=2)
    notes = [{"names": ["n1", "n2", "n3"]}, {"names": []}, {"names": ["n4"]}]
    result = run(s, notes, num_workers=2, worker_type=worker_type)
    assert [n["names"] for n in result.outputs["out"]] == [["n1", "n2", "n3"], [], ["n4"]]
    assert all(n["files_present_at_route"] for n in result.outputs["out"])
    assert (tmp_path / "n3.txt").read_text() == "N3"
    assert len(list(tmp_path.iterdir())) == 4


def test_on_item_batch_wrong_number_of_dump_tuples():
    with pytest.raises(StepFailure) as info:
        run(WrongCount(batch_size=2), [{"items": [1, 2]}])
    msg = str(info.value)
    assert "step 'S'" in msg
    assert "returned 1 dump tuples for a batch of 2 items" in msg


def test_dump_tuples_without_dump_fn():
    with pytest.raises(StepFailure, match="no dump_fn"):
        run(DumpsWithoutDumpFn(batch_size=2), [{"items": [1, 2]}])


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("num_workers", [0, 2])
def test_failing_load_fn_raise_names_the_item(num_workers):
    notes = [{"items": ["ok1"]}, {"items": ["ok2", "bad", "ok3"]}]
    with pytest.raises(StepFailure) as info:
        run(flaky(), notes, num_workers=num_workers)
    msg = str(info.value)
    assert "workflow 'w', step 'S' (node 9)" in msg
    assert "load_fn failed on item 'bad' (note 1, item 1)" in msg
    assert "ValueError: cannot load bad" in msg


def test_failing_load_fn_skip_records_and_rest_arrive():
    notes = [
        {"id": 0, "items": ["a"]},
        {"id": 1, "items": ["b", "bad", "c"]},
        {"id": 2, "items": ["d", "e"]},
    ]
    result = run(flaky(), notes, num_workers=2, on_item_error="skip")
    (error,) = result.errors
    assert error.stage == "load_fn"
    assert (error.note_index, error.item_index, error.item) == (1, 1, "'bad'")
    assert "ValueError: cannot load bad" in error.error
    out = {n["id"]: n for n in result.outputs["out"]}
    assert out[0]["got"] == ["a"]
    assert out[2]["got"] == ["d", "e"]
    assert notes[1]["got"] == ["b", "c"]
    assert result.stats["items_failed"] == 1 and result.stats["items_skipped"] == 1


def test_on_item_batch_raising_names_the_batch_item():
    with pytest.raises(StepFailure) as info:
        run(BatchRaises(batch_size=2), [{"items": [1, 2]}, {"items": [3, 4]}])
    assert "on_item_batch failed on item 3 (note 1, item 0)" in str(info.value)
    assert "RuntimeError: model exploded" in str(info.value)

    notes = [{"id": 0, "items": [1, 2]}, {"id": 1, "items": [3, 4]}, {"id": 2, "items": [5]}]
    result = run(BatchRaises(batch_size=2), notes, on_item_error="skip")
    assert [(e.note_index, e.item_index) for e in result.errors] == [(1, 0), (1, 1)]
    assert notes[0]["got"] == [1, 2] and notes[2]["got"] == [5]


class OutOfGpuMemory(BatchRaises):
    """Raises what torch raises when CUDA runs out of memory (the class exists without a GPU)."""

    def on_item_batch(self, outputs, items, notes):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")


@pytest.mark.parametrize("on_item_error", ["raise", "skip"])
def test_cuda_out_of_memory_fails_the_step_under_skip_too_naming_the_batch_size(on_item_error):
    """Skipping the batch would skip every later batch of that size alike: the step fails at once,
    naming the batch size and what to lower (tests/gpu runs it on a real GPU)."""
    with pytest.raises(GpuOutOfMemory) as info:
        run(OutOfGpuMemory(batch_size=2), [{"items": [1, 2, 3]}], on_item_error=on_item_error)
    text = str(info.value)
    assert "CUDA ran out of memory in on_item_batch on a batch of 2 items (batch_size 2" in text
    assert "lower batch_size" in text and info.value.batch_size == 2
    assert isinstance(info.value.__cause__, torch.cuda.OutOfMemoryError)


def test_on_end_runs_when_batch_step_fails():
    EndTracker.ended.clear()
    s = EndTracker(batch_size=2)
    notes = [{"id": 0, "items": [1]}, {"id": 1, "other": 1}]
    with pytest.raises(StepFailure):
        run_step(
            s,
            "batch",
            notes,
            pins=["out"],
            label="L",
            node=("9", "S"),
            emit=lambda *a: None,
            runtime=settings(),
        )
    assert EndTracker.ended == [s]


# ---------------------------------------------------------------------------------------------
# Batch steps in workflows


def _expected_parts(repo):
    from dagster_graphbook.model.registry import _import_file

    module = _import_file((repo / "custom_nodes" / "word_split" / "nodes.py").resolve())
    base = repo / "sample_data" / "word_split"
    with open(base / "files.csv", newline="") as f:
        paths = [(base / row["path"]).resolve() for row in csv.DictReader(f)]
    return {p.stem: module.split_words_into_parts(module.read_words(str(p)), 4) for p in paths}, [
        p.stem for p in paths
    ]


def test_word_split_workflow_writes_files(repo, run_wf, tmp_path, dagster_home):
    out_dir = tmp_path / "out"
    run = run_wf(
        repo / "workflows" / "word_split.json",
        custom_nodes=[repo / "custom_nodes" / "word_split"],
        params={"SplitWords.output_dir": str(out_dir)},
    )
    assert run.success, run.failure
    expected, order = _expected_parts(repo)
    assert len(order) == 6
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(f"{name}.txt" for name in order)
    for name, parts in expected.items():
        assert (out_dir / f"{name}.txt").read_text().splitlines() == parts
    files = run.notes["SplitWords"]["OutputFiles"]
    meta = run.notes["SplitWords"]["Metadata"]
    assert [n["name"] for n in files] == order and [n["name"] for n in meta] == order
    assert all(n["output_path"] == str(out_dir / f"{n['name']}.txt") for n in files)
    assert all(
        n["parts"] == expected[n["name"]] and n["num_parts"] == len(expected[n["name"]])
        for n in meta
    )
    instance = dg.DagsterInstance.from_config(dagster_home)
    event = instance.get_latest_materialization_event(
        dg.AssetKey(["word_split", "SplitWords", "OutputFiles"])
    )
    md = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert md["details"]["batches"] == 2  # 6 files, batch_size 4
    assert md["items"] == 6 and md["dagster/row_count"] == 6 and md["details"]["dumps"] == 6


def test_word_split_class_form_matches(repo, run_wf, tmp_path):
    out_dir = tmp_path / "class_out"
    csv_path = repo / "sample_data" / "word_split" / "files.csv"
    path = write_workflow(
        tmp_path,
        "word_split_class",
        [
            step_node("0", "InputFiles", {"csv_path": str(csv_path)}, source=True),
            step_node(
                "1",
                "SplitWordsClass",
                {"batch_size": 5, "output_dir": str(out_dir)},
                outputs=["OutputFiles", "Metadata"],
            ),
        ],
        [edge("0", "out", "1")],
    )
    run = run_wf(
        path,
        custom_nodes=[repo / "custom_nodes" / "word_split"],
        params={"SplitWordsClass.runtime.worker_type": "thread"},
    )
    assert run.success, run.failure
    expected, order = _expected_parts(repo)
    assert [n["name"] for n in run.notes["SplitWordsClass"]["Metadata"]] == order
    assert {n["name"]: n["parts"] for n in run.notes["SplitWordsClass"]["Metadata"]} == expected
    for name, parts in expected.items():
        assert (out_dir / f"{name}.txt").read_text().splitlines() == parts


def test_word_split_missing_file_fails_naming_item(repo, run_wf, tmp_path, dagster_home):
    data = tmp_path / "data"
    data.mkdir()
    (data / "one.txt").write_text("alpha beta")
    (data / "files.csv").write_text("path\none.txt\nmissing.txt\n")
    run = run_wf(
        repo / "workflows" / "word_split.json",
        custom_nodes=[repo / "custom_nodes" / "word_split"],
        params={
            "InputFiles.csv_path": str(data / "files.csv"),
            "SplitWords.output_dir": str(tmp_path / "o"),
            "SplitWords.runtime.num_workers": 0,
        },
    )
    assert not run.success
    instance = dg.DagsterInstance.from_config(dagster_home)
    texts = []
    for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        error = record.dagster_event.step_failure_data.error
        while error is not None:
            texts.append(error.message)
            error = error.cause
    text = "\n".join(texts)
    assert "step 'SplitWords' (node 1)" in text
    assert "load_fn failed on item" in text and "missing.txt" in text and "(note 1, item 0)" in text
    assert "FileNotFoundError" in text


# ---------------------------------------------------------------------------------------------
# Stacked tensors through the workers' shared-memory rings


class KeepTensors(BatchStep):
    """Keeps every output tensor in its note: reused ring slots must never show through."""

    def __init__(self, batch_size=4, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        time.sleep(random.random() * 0.003)  # workers finish out of order
        return torch.full((3, 5), float(item))

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note.setdefault("kept", []).append(out)


@pytest.mark.parametrize("prefetch", [1, 3])
def test_stacked_outputs_kept_by_the_step_stay_intact(prefetch):
    notes = [{"items": list(range(i * 7, i * 7 + 7))} for i in range(30)]  # 210 items, 53 batches
    result = run(KeepTensors(batch_size=4), notes, num_workers=2, prefetch=prefetch)
    assert result.stats["items"] == 210
    for note in notes:
        assert [float(t[0, 0]) for t in note["kept"]] == [float(x) for x in note["items"]]
        assert all(bool((t == t[0, 0]).all()) and t.shape == (3, 5) for t in note["kept"])


class NiceProbe(BatchStep):
    """Records the nice value each load_fn and dump_fn call ran at."""

    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        return (
            os.getpid(),
            os.getpriority(os.PRIO_PROCESS, 0) if os.getpid() != MAIN_PID else _thread_nice(),
        )

    @staticmethod
    def dump_fn(path, _):
        with open(path, "w") as f:
            f.write(
                str(
                    os.getpriority(os.PRIO_PROCESS, 0)
                    if os.getpid() != MAIN_PID
                    else _thread_nice()
                )
            )

    def on_item_batch(self, outputs, items, notes):
        for out, note in zip(outputs, notes):
            note.setdefault("nice", []).append(out[1])
        return [(note["dir"] + f"/{item}.txt", None) for item, note in zip(items, notes)]


MAIN_PID = os.getpid()


def _thread_nice():
    import threading

    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_worker_nice_lowers_loader_and_dump_worker_priority_only(tmp_path, worker_type):
    base = os.getpriority(os.PRIO_PROCESS, 0)
    notes = [{"items": [1, 2, 3], "dir": str(tmp_path)}]
    run(NiceProbe(), notes, num_workers=2, worker_type=worker_type, worker_nice=5)
    assert notes[0]["nice"] == [min(19, base + 5)] * 3
    assert [(tmp_path / f"{i}.txt").read_text() for i in (1, 2, 3)] == [str(min(19, base + 5))] * 3
    assert (
        os.getpriority(os.PRIO_PROCESS, 0) == base and _thread_nice() == base
    )  # the step itself keeps its priority


class PaceProbe(NiceProbe):
    """NiceProbe whose load_fn or on_item_batch takes ``slow`` seconds a call: which one makes the
    step model-bound or load-bound."""

    def __init__(self, slow_model: bool):
        super().__init__(batch_size=2)
        self.slow_model = slow_model

    @staticmethod
    def load_fn(item, slow=0.0):
        time.sleep(slow)
        return NiceProbe.load_fn(item)

    def on_item_batch(self, outputs, items, notes):
        if self.slow_model:
            time.sleep(0.02)
        return super().on_item_batch(outputs, items, notes)


@pytest.mark.parametrize("worker_type", ["process", "thread"])
@pytest.mark.parametrize("model_bound", [True, False], ids=["model-bound", "load-bound"])
def test_default_worker_priority_is_lowered_only_when_the_model_is_the_bottleneck(
    tmp_path, worker_type, model_bound
):
    """worker_nice -1 (the default): after the first batches the loaders and dumpers of a step
    that hardly waits for them are lowered by 10, and the step says so; a step that waits for its
    loaders leaves them at its own priority."""
    from dagster_graphbook.execution.pools.priority import AUTO_NICE, WARMUP_BATCHES

    base = os.getpriority(os.PRIO_PROCESS, 0)
    step_obj = PaceProbe(slow_model=model_bound)
    step_obj.load_fn_params = {"slow": 0.0 if model_bound else 0.02}
    n = 2 * (WARMUP_BATCHES + 12)
    notes = [{"items": list(range(n)), "dir": str(tmp_path)}]
    said = []
    result = run_batch_step(
        step_obj,
        notes,
        settings(num_workers=2, worker_type=worker_type, prefetch=2),
        emit=lambda level, msg: said.append(msg),
    )
    assert result.stats["worker_nice"] == (AUTO_NICE if model_bound else 0)  # in its metadata
    seen = notes[0]["nice"]
    lowered = min(19, base + AUTO_NICE)
    if model_bound:
        assert seen[0] == base and seen[-1] == lowered, seen
        dumped = [int((tmp_path / f"{i}.txt").read_text()) for i in range(n)]
        assert dumped[-1] == lowered, dumped
        assert any("lowered by nice 10" in m for m in said), said
    else:
        assert set(seen) == {base}, seen
        assert not any("lowered by nice" in m for m in said), said
    assert os.getpriority(os.PRIO_PROCESS, 0) == base and _thread_nice() == base


class SlowDumps(PaceProbe):
    """Fast loads and model, dump_fn 20 ms: the step waits for its dumps to drain."""

    @staticmethod
    def dump_fn(path, _):
        time.sleep(0.02)
        NiceProbe.dump_fn(path, _)


@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_a_step_waiting_for_its_dumps_keeps_its_workers_priority(tmp_path, worker_type):
    """Waiting for dumps is not computing: lowering the dumpers would slow the bottleneck."""
    from dagster_graphbook.execution.pools.priority import WARMUP_BATCHES

    base = os.getpriority(os.PRIO_PROCESS, 0)
    n = 2 * (WARMUP_BATCHES + 12)
    notes = [{"items": list(range(n)), "dir": str(tmp_path)}]
    result = run(
        SlowDumps(slow_model=False),
        notes,
        num_workers=2,
        worker_type=worker_type,
        max_dumps_in_flight=2,
    )
    assert result.stats["worker_nice"] == 0
    assert {int((tmp_path / f"{i}.txt").read_text()) for i in range(n)} == {base}


def test_a_worker_nice_set_by_the_run_is_kept_even_when_model_bound(tmp_path):
    from dagster_graphbook.execution.pools.priority import WARMUP_BATCHES

    base = os.getpriority(os.PRIO_PROCESS, 0)
    n = 2 * (WARMUP_BATCHES + 12)
    notes = [{"items": list(range(n)), "dir": str(tmp_path)}]
    run(PaceProbe(slow_model=True), notes, num_workers=2, worker_nice=0)
    assert set(notes[0]["nice"]) == {base}


def test_ring_slot_rewritten_too_early_fails_loudly():
    """With one slot per worker (fewer than a worker runs ahead), the stamp check must catch the
    rewrite."""
    from dagster_graphbook.execution.pools.loader import ItemDataset, ProcessLoader

    dataset = ItemDataset(list(range(64)), KeepTensors.load_fn, {})
    settings = BatchRuntime(num_workers=2, prefetch=2, start_method="fork")
    loader = ProcessLoader(dataset, 4, settings, pin_memory=False, node=("9", "S"), ring_slots=1)
    try:
        with pytest.raises(RuntimeError, match="rewrote ring slot 0 while batch"):
            for _ in loader:
                time.sleep(0.05)  # a slow step: the workers run ahead into the only slot
    finally:
        loader.close()


class Doubles(BatchStep):
    """Items are rows of a note's tensor (``item_key`` holds a tensor); load_fn doubles them."""

    def __init__(self):
        super().__init__(batch_size=3, item_key="rows")

    @staticmethod
    def load_fn(row):
        return (row * 2, os.getpid())

    def on_item_batch(self, outputs, items, notes):
        for (out, pid), note in zip(outputs, notes):
            note.setdefault("doubled", []).append(out)
            note.setdefault("pids", []).append(pid)


def test_kept_pools_serve_later_chunks_with_tensor_items():
    """A stream's later chunks reach the workers forked for its first one: items (here views of
    a note's tensor) are sent by value with their tasks, never by sharing the note's storage."""
    from dagster_graphbook.execution.pools.batch_pools import BatchPools

    pools = BatchPools(keep=True)
    chunks = [
        [{"rows": torch.arange(k * 40, k * 40 + 40, dtype=torch.float32).view(10, 4)}]
        for k in range(3)
    ]
    try:
        for chunk in chunks:
            run_batch_step(Doubles(), chunk, settings(num_workers=2), pools=pools)
    finally:
        pools.close()
    for chunk in chunks:
        note = chunk[0]
        assert torch.equal(torch.stack(note["doubled"]), note["rows"] * 2)
        assert not note["rows"].is_shared()  # the note's tensor never went to /dev/shm
    pids = {pid for chunk in chunks for pid in chunk[0]["pids"]}
    assert len(pids) == 2 and os.getpid() not in pids


def _lent_batches(keep):
    """Run a ProcessLoader over 24 batches; ``keep(batch)`` is what the step keeps of each.
    Returns (the loader after the run, what was kept, whether each batch was a view of a ring
    block)."""
    from dagster_graphbook.execution.pools.loader import ItemDataset, ProcessLoader

    dataset = ItemDataset(list(range(96)), KeepTensors.load_fn, {})
    settings = BatchRuntime(num_workers=2, prefetch=2, start_method="fork")
    loader = ProcessLoader(dataset, 4, settings, pin_memory=False, node=("9", "S"))
    kept, in_ring = [], []
    try:
        for batch in loader:
            ptr = batch.stacked.data_ptr()
            in_ring.append(
                any(b.data_ptr() <= ptr < b.data_ptr() + b.numel() for b in loader.blocks.values())
            )
            kept.append((batch.indices, keep(batch)))
            batch = None
    finally:
        loader.close()
    return loader, kept, in_ring


def test_cpu_batches_are_lent_from_the_ring_without_a_copy():
    loader, _, in_ring = _lent_batches(lambda batch: None)
    assert all(in_ring) and len(in_ring) == 24
    assert loader.lend  # nothing kept a batch: every one was lent


@pytest.mark.parametrize(
    "keep",
    [
        lambda b: b.outputs(),  # the per-item views (a note keeping its tensor)
        lambda b: b.stacked[1:].numpy(),  # a numpy array on the block
        lambda b: b.stacked.untyped_storage(),  # the storage object alone
    ],
    ids=["views", "numpy", "storage"],
)
def test_a_kept_lent_batch_is_never_overwritten(keep):
    """A step that keeps what it was lent retires the slot (its worker takes a new block) and the
    rest of the run is copied out: every kept value still holds its own items afterwards."""
    loader, kept, in_ring = _lent_batches(keep)
    assert in_ring[0] and not any(in_ring[1:])  # lent once, then copied
    assert not loader.lend
    for indices, value in kept:
        data = value if not isinstance(value, list) else torch.stack(value)
        if isinstance(value, torch.UntypedStorage):
            flat = torch.tensor([], dtype=torch.float32).set_(value)
            data = flat[len(flat) - 4 * 15 :].view(4, 3, 5)  # after the ring's header, if any
        data = torch.as_tensor(data)
        first = indices[1:] if data.shape[0] == len(indices) - 1 else indices
        assert [float(t[0, 0]) for t in data] == [float(i) for i in first]


_SIGCHLD_PROBE = r"""
import json, logging, signal, sys, threading, time
from dagster_graphbook.authoring.steps import BatchStep
from dagster_graphbook.execution.batch.run import run_batch_step
from dagster_graphbook.plan.settings import BatchRuntime
from dagster_graphbook.execution.errors import GpuOutOfMemory, StepFailure


class Explodes(BatchStep):
    def __init__(self):
        super().__init__(batch_size=2, item_key="items")

    @staticmethod
    def load_fn(item):
        time.sleep(0.3)
        return item

    def on_item_batch(self, outputs, items, notes):
        raise RuntimeError("model exploded")


settings = BatchRuntime(num_workers=2, worker_type="process", device="cpu")
failure = None
try:
    run_batch_step(Explodes(), [{"items": list(range(40))}], settings, label="step 'Explodes'")
except StepFailure as exc:
    failure = str(exc).splitlines()[0]
time.sleep(1.0)  # the terminated workers' SIGCHLD has arrived by now
got = []
probe = threading.Thread(target=lambda: got.append(logging.getLogger("probe") is not None))
probe.start()
probe.join(5)  # another thread can take logging's module lock
handler = signal.getsignal(signal.SIGCHLD)
print(json.dumps({
    "failure": failure,
    "sigchld": getattr(handler, "__qualname__", str(handler)),
    "logging_lock_free": bool(got),
}))
"""


def test_no_sigchld_handler_raises_into_the_step(tmp_path):
    """torch's SIGCHLD handler raised "worker killed" at a random line of the step's thread when
    the loader terminated its workers: once inside logging's lock, the lock leaked and the next
    thread that logged (the dump pool's manager thread) hung the run. The pool keeps it out."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _SIGCHLD_PROBE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failure"] and "model exploded" in result["failure"], result
    assert "SIGCHLD" not in result["sigchld"], result  # torch's handler is not installed
    assert result["logging_lock_free"], result


# ---------------------------------------------------------------------------------------------
# Container types through the device move (tests/execution/test_device.py: the move itself),
# worker death as WorkerDied

Pair = __import__("collections").namedtuple("Pair", "image label")


class Containers(BatchStep):
    """load_fn returns a namedtuple and an OrderedDict holding tensors."""

    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)
        self.seen = []

    @staticmethod
    def load_fn(item):
        from collections import OrderedDict

        pair = Pair(torch.full((2,), float(item)), item)
        return OrderedDict([("pair", pair), ("plain", (torch.zeros(1), "x"))])

    def on_item_batch(self, outputs, items, notes):
        for out in outputs:
            self.seen.append(
                (
                    type(out).__name__,
                    type(out["pair"]).__name__,
                    type(out["plain"]).__name__,
                    list(out),
                    out["pair"].label,
                    out["pair"].image.device.type,
                )
            )


@pytest.mark.parametrize("device", ["cpu", "meta"])  # meta: a device move without a GPU
@pytest.mark.parametrize(
    "pool", [dict(num_workers=0), dict(num_workers=2), dict(num_workers=2, worker_type="thread")]
)
def test_load_fn_containers_reach_on_item_batch_with_their_types(pool, device):
    """A namedtuple and an OrderedDict from load_fn reach on_item_batch as such after the device
    move (it made them a tuple and a dict where CPU runs kept them)."""
    step_obj = Containers()
    run(step_obj, [{"items": [1, 2, 3]}], **pool, device=device)
    assert step_obj.seen == [
        ("OrderedDict", "Pair", "tuple", ["pair", "plain"], i, device) for i in (1, 2, 3)
    ]


class DiesInLoad(BatchStep):
    def __init__(self, batch_size=2, item_key="items"):
        super().__init__(batch_size, item_key)

    @staticmethod
    def load_fn(item):
        if item == 5:
            os.kill(os.getpid(), __import__("signal").SIGKILL)
        return item

    def on_item_batch(self, outputs, items, notes):
        return None


class DiesInDump(DiesInLoad):
    @staticmethod
    def load_fn(item):
        return item

    def on_item_batch(self, outputs, items, notes):
        return [(item,) for item in items]

    @staticmethod
    def dump_fn(item):
        if item == 5:
            os.kill(os.getpid(), __import__("signal").SIGKILL)


class ExitsInLoad(DiesInLoad):
    @staticmethod
    def load_fn(item):
        if item == 5:
            os._exit(3)  # a C library's exit(), say: no signal
        return item


def test_a_worker_that_exits_by_itself_is_not_said_killed_by_a_signal():
    from dagster_graphbook.execution.errors import WorkerDied

    with pytest.raises(WorkerDied) as info:
        run(ExitsInLoad(), [{"items": list(range(12))}], num_workers=2)
    first = str(info.value).splitlines()[0]
    assert "a loader worker process died (it exited: os._exit" in first, first
    assert f"pid {info.value.pids[0]} exited with code 3" in first, first
    assert "killed by a signal" not in first


@pytest.mark.parametrize("step_cls, stage", [(DiesInLoad, "load_fn"), (DiesInDump, "dump_fn")])
def test_dead_worker_fails_the_step_with_worker_died(step_cls, stage):
    from dagster_graphbook.execution.errors import WorkerDied

    with pytest.raises(WorkerDied) as info:
        run(step_cls(), [{"items": list(range(12))}], num_workers=2)
    died = info.value
    assert isinstance(died, StepFailure) and isinstance(died, dg.Failure)
    assert died.stage == stage and len(died.pids) >= 1
    first = str(died).splitlines()[0]
    assert first.startswith("workflow 'w', step 'S' (node 9): a ")
    assert f"pid {died.pids[0]} killed by SIGKILL" in first, first
    if stage == "load_fn":
        assert "a loader worker process died (killed by a signal" in first
        assert " of 12: " in first
    else:
        assert "a dump worker process died (killed by a signal" in first
