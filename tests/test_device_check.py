"""The prepared GPU device check (benchmarks/gpu/device_check.sh) runs here on the CPU with
``--cpu``, every stage, so it cannot rot between the rare tasks that are lent a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.long  # ~30 s, collected near the end of the suite: handed out early instead
@pytest.mark.timeout(300)
def test_device_check_runs_every_stage_on_the_cpu_and_says_what_it_skipped(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu" / "device_check.sh"), "--cpu"],
        cwd=tmp_path,  # the script finds the repository itself
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    results = list(tmp_path.glob("gpu-*.md"))
    assert len(results) == 1, done.stdout + done.stderr
    text = results[0].read_text()
    assert done.returncode == 0, text
    assert "All stages passed." in text
    for stage in ("machine", "gpu_tests", "gpu_decode", "loader_gpu_rows"):
        assert re.search(rf"## {stage}\n\n`[^`]+`: exit 0 in \d+ s", text), stage
    # the CUDA parts are said to be skipped, not silently left out
    assert "CUDA: not available" in text
    assert "needs a CUDA GPU" in text  # pytest -rs names the skipped gpu tests
    assert "GPU: n/a (no CUDA device)" in text
    assert (tmp_path / "device_check.log").stat().st_size > 0
