"""Run ownership (``dagster_graphbook/execution/ownership/dead_runs.py``) with a real instance,
real lock files and a folder made read-only for real; the end-to-end runs are in
``tests/e2e/test_integrity_signals.py``."""

from __future__ import annotations

import os
import uuid

import dagster as dg
import pytest

from dagster_graphbook.execution.ownership import dead_runs
from tests.support.mounts import can_make_read_only, read_only_switch


def test_a_lock_its_owner_could_not_remove_does_not_get_the_run_failed(
    tmp_path, dagster_home, monkeypatch
):
    """The run-owners folder turned read-only while a run goes on: its owner cannot remove the
    lock at the end, and lets go of it before the run is recorded finished (the executor's
    caller writes that). A sweep in that moment found a free lock on a linked file, the sign of
    a killed run, and failed a run that succeeded. The owner marks the file ended; a sweep
    leaves such a run alone, and judges it only if it is still unfinished long after."""
    if not can_make_read_only(tmp_path):
        pytest.skip("root here may not mount (no CAP_SYS_ADMIN)")
    warned: list = []
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        run_id = str(uuid.uuid4())
        instance.add_run(
            dg.DagsterRun(job_name="job", run_id=run_id, status=dg.DagsterRunStatus.STARTED)
        )
        owners = os.path.join(dagster_home, ".graphbook", "run-owners")
        with read_only_switch(owners) as (freeze, thaw):
            with dead_runs.own_run(instance, run_id, warned.append):
                freeze()
            thaw()
            assert os.listdir(owners) == [f"{run_id}.lock"]
            assert any("could not remove the owner lock" in m for m in warned), warned
            assert dead_runs.fail_dead_runs(instance) == []  # its end is being recorded
            assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
            monkeypatch.setattr(dead_runs, "_STALE_TMP_S", 0.0)  # long after: still STARTED
            assert dead_runs.fail_dead_runs(instance) == [run_id]
        assert os.listdir(owners) == []
