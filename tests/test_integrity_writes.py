"""Atomic outputs (issue 11.2): a real process killed with SIGKILL in the middle of a write, and a
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

from dagster_graphbook.tables import write_table
from dagster_graphbook.versions import write_atomic

# Writes half of a real Parquet file, then stalls: the parent kills it there.
HALF_WRITER = textwrap.dedent("""
    import io, sys, time
    import pandas as pd
    from upath import UPath
    from dagster_graphbook.tables import write_table

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
