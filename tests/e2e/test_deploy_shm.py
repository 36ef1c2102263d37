"""Deployment in a container: a process-pool batch step of image tensors under a real 64 MiB
``/dev/shm`` (Docker's and Kubernetes' default), made with a private mount namespace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.mounts import can_unshare

SCRIPT = textwrap.dedent("""
    import os, sys, torch
    from dagster_graphbook.authoring.steps import BatchStep
    from dagster_graphbook.execution.batch.run import run_batch_step
    from dagster_graphbook.plan.settings import BatchRuntime

    st = os.statvfs("/dev/shm")
    assert st.f_blocks * st.f_frsize <= 64 * 2**20, "not the small /dev/shm"

    class Images(BatchStep):
        def __init__(self):
            super().__init__(batch_size=16, item_key="items")

        @staticmethod
        def load_fn(item):
            return torch.full((3, 256, 256), float(item["i"]))  # 768 KiB: 12 MiB per batch

        def on_item_batch(self, tensors, items, notes):
            for t, item in zip(tensors, items):
                item["mean"] = float(t.mean())

    notes = [{"items": [{"i": i} for i in range(n, n + 16)]} for n in range(0, 160, 16)]
    warnings = []
    settings = BatchRuntime(num_workers=2, worker_type="process", prefetch=2, device="cpu")
    result = run_batch_step(Images(), notes, settings, pins=["out"], label="step 'Images'",
                            emit=lambda level, msg: level == "warning" and warnings.append(msg))
    means = [item["mean"] for note in result.outputs["out"] for item in note["items"]]
    assert means == [float(i) for i in range(160)], means
    print("WARNINGS:", warnings)
    print("OK")
""")


def test_process_batch_step_works_with_a_64_mib_dev_shm(tmp_path):
    why = can_unshare()
    if why:
        pytest.skip(why)
    script = tmp_path / "small_shm.py"
    script.write_text(SCRIPT)
    shell = f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {sys.executable} {script}"
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "OK" in proc.stdout, out[-3000:]
    # the fallback says what happened and how to give the container more
    assert "batches travel through pipes" in proc.stdout and "--shm-size" in proc.stdout, out[
        -3000:
    ]


FULL_SCRIPT = textwrap.dedent("""
    import os, sys, torch
    from dagster_graphbook.authoring.steps import BatchStep
    from dagster_graphbook.execution.batch.run import run_batch_step
    from dagster_graphbook.plan.settings import BatchRuntime

    fd = os.open("/dev/shm/filler", os.O_WRONLY | os.O_CREAT)  # what leaked fills /dev/shm
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        os.close(fd)
    print("FREE", os.statvfs("/dev/shm").f_bavail * os.statvfs("/dev/shm").f_frsize)

    class Images(BatchStep):
        def __init__(self):
            super().__init__(batch_size=4, item_key="items")

        @staticmethod
        def load_fn(item):
            return torch.full((3, 8, 8), float(item["i"]))

        def dump_fn(self, item):
            return None

        def on_item_batch(self, tensors, items, notes):
            for t, item in zip(tensors, items):
                item["mean"] = float(t.mean())
            return [(item,) for item in items]

    notes = [{"items": [{"i": i} for i in range(n, n + 4)]} for n in range(0, 16, 4)]
    warnings = []
    settings = BatchRuntime(num_workers=2, worker_type="process", device="cpu")
    result = run_batch_step(Images(), notes, settings, pins=["out"], label="step 'Images'",
                            emit=lambda level, msg: level == "warning" and warnings.append(msg))
    means = [item["mean"] for note in result.outputs["out"] for item in note["items"]]
    assert means == [float(i) for i in range(16)], means
    print("WARNINGS:", warnings)
    print("OK")
""")


def test_process_batch_step_runs_when_dev_shm_is_full(tmp_path):
    """A full /dev/shm failed the step with a bare 'OSError: [Errno 28] No space left on device'
    from a worker semaphore; now the step runs its pools as threads and says why and what to do."""
    why = can_unshare()
    if why:
        pytest.skip(why)
    script = tmp_path / "full_shm.py"
    script.write_text(FULL_SCRIPT)
    shell = f"mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {sys.executable} {script}"
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", shell],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "OK" in proc.stdout, out[-3000:]
    assert "FREE 0" in proc.stdout, out[-3000:]
    assert "/dev/shm is full (0 KiB free)" in proc.stdout and "--shm-size" in proc.stdout, out
