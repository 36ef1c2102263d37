"""Atomic outputs: a real process killed with SIGKILL in the middle of a write, and a
write that fails (disk full), leave the previous file readable and no temporary file behind."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from upath import UPath

from dagster_graphbook.store.tables import write_table
from dagster_graphbook.store.versions import write_atomic
from tests.support.nodes import copy_nodes

# Writes half of a real Parquet file, then stalls: the parent kills it there.
HALF_WRITER = textwrap.dedent("""
    import io, sys, time
    import pandas as pd
    from upath import UPath
    from dagster_graphbook.store.tables import write_table

    real = pd.DataFrame.to_parquet

    def half(self, f, **kw):
        buf = io.BytesIO()
        real(self, buf, **kw)
        data = buf.getvalue()
        f.write(data[: len(data) // 2])
        f.flush()
        print("HALF", flush=True)
        time.sleep(60)

    pd.DataFrame.to_parquet = half
    write_table([{"value": i, "name": f"n{i}"} for i in range(5000)], UPath(sys.argv[1]))
""")


def test_kill_9_during_a_parquet_write_keeps_the_previous_table(tmp_path):
    path = tmp_path / "table.parquet"
    write_table([{"value": -1, "name": "previous"}], UPath(str(path)))
    proc = subprocess.Popen(
        [sys.executable, "-c", HALF_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "HALF"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert pd.read_parquet(path).to_dict("records") == [{"value": -1, "name": "previous"}]
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "table.parquet"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".tmp-")  # what SIGKILL leaves...
    write_table([{"value": 1, "name": "next"}], UPath(str(path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "table.parquet"
    ]  # ...the next write sweeps
    assert pd.read_parquet(path).to_dict("records") == [{"value": 1, "name": "next"}]


def test_a_failed_write_removes_its_temporary_file(tmp_path, monkeypatch):
    """Disk full in the middle of a table write: the previous table stays, no temporary file."""
    path = tmp_path / "table.parquet"
    write_table([{"value": -1}], UPath(str(path)))

    def disk_full(self, f, **kw):
        f.write(b"PAR1 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_table([{"value": 1}], UPath(str(path)))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.parquet"]
    assert pd.read_parquet(path).to_dict("records") == [{"value": -1}]


def test_a_failed_notes_write_removes_its_temporary_file(tmp_path):
    path = UPath(str(tmp_path / "notes.pkl"))
    write_atomic(path, lambda f: f.write(b"previous"))

    def unpicklable(f):
        f.write(b"partial")
        raise TypeError("cannot pickle '_thread.lock' object")

    with pytest.raises(TypeError):
        write_atomic(path, unpicklable)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.pkl"]
    assert (tmp_path / "notes.pkl").read_bytes() == b"previous"


# The nightly demo's dump_fn, killed while PIL writes the resized copy.
RESIZE_WRITER = textwrap.dedent("""
    import importlib.util, sys, time
    from PIL import Image

    spec = importlib.util.spec_from_file_location("nightly_nodes", sys.argv[1])
    nodes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nodes)
    if sys.argv[4] == "stall":
        def half(self, fp, format=None, **kw):
            with open(fp, "wb") as f:
                f.write(b"\\x89PNG\\r\\n\\x1a\\n half an image")
            print("HALF", flush=True)
            time.sleep(60)

        Image.Image.save = half
    print(nodes.write_resized(sys.argv[2], sys.argv[3], 8), flush=True)
""")


def test_kill_9_while_the_demo_writes_a_copy_leaves_no_image_named_file(tmp_path):
    """SaveResized's temporary file was ``<name>.png.tmp-<pid>.png``: a kill -9 left a half image
    under a ``.png`` name in the day's outputs, and nothing ever removed it."""
    from PIL import Image

    from tests.support.paths import REPO

    nodes = REPO / "custom_nodes" / "nightly" / "nightly_nodes.py"
    src = tmp_path / "src.png"
    Image.new("RGB", (16, 16), "red").save(src)
    out = tmp_path / "outputs" / "2026-01-01" / "circle"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-c", RESIZE_WRITER, str(nodes), str(src)]
    writer = subprocess.Popen(
        [*cmd, str(out / "img_0001.png"), "stall"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert writer.stdout.readline().strip() == "HALF"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.communicate()
    assert [p for p in os.listdir(out) if p.endswith(".png")] == []  # no half image as an image
    done = subprocess.run([*cmd, str(out / "img_0002.png"), "ok"], capture_output=True, env=env)
    assert done.returncode == 0, done.stderr
    assert os.listdir(out) == ["img_0002.png"]  # the killed writer's temporary file is swept
    with Image.open(out / "img_0002.png") as image:
        assert image.size == (8, 8)


FULL_DISK_RUN = textwrap.dedent("""
    import json, os, sys
    from dagster_graphbook import run_workflow

    out = sys.argv[1]
    with open(os.path.join(out, "out.jsonl"), "w") as f:
        f.write('{"previous": true}\\n')
    nodes = [
        {"id": "0", "type": "step", "data": {"name": "Count", "parameters": {}}},
        {"id": "1", "type": "step", "data": {"name": "DumpJSONL", "parameters": {
            "jsonl_path": {"value": os.path.join(out, "out.jsonl")}}}},
    ]
    edges = [{"source": "0", "sourceHandle": "out", "target": "1", "targetHandle": "in"}]
    wf = os.path.join(sys.argv[2], "full.json")
    with open(wf, "w") as f:
        json.dump({"nodes": nodes, "edges": edges}, f)
    run = run_workflow(wf, [sys.argv[3]], dagster_home=sys.argv[4])
    print("SUCCESS" if run.success else "FAILURE", run.failure)
    print("LEFT", sorted(os.listdir(out)))
    print("KEPT", open(os.path.join(out, "out.jsonl")).read().strip())
""")


def test_a_full_disk_under_dump_jsonl_keeps_the_previous_file_and_no_temporary(
    tmp_path, dagster_home
):
    """DumpJSONL on a full disk (a real 16 KiB tmpfs): closing its temporary file failed and left
    it behind, holding the space of the disk that was already full."""
    from tests.support.mounts import can_unshare

    why = can_unshare()
    if why:
        pytest.skip(why)
    nodes = copy_nodes(tmp_path / "nodes", "count_nodes.py", "write_counts")
    small = tmp_path / "small"
    small.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK_RUN)
    shell = (
        f"mount -t tmpfs -o size=16k tmpfs {small} && exec {sys.executable} {script} {small} "
        f"{tmp_path} {nodes} {dagster_home}"
    )
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "FAILURE" in proc.stdout, out[-3000:]
    assert "step 'DumpJSONL'" in proc.stdout and "No space left on device" in proc.stdout, out
    assert "LEFT ['out.jsonl']" in proc.stdout, proc.stdout[-2000:]
    assert 'KEPT {"previous": true}' in proc.stdout, proc.stdout[-2000:]
