"""`dagster-graphbook materialize` (and its `--from-failure` resume) run a code location's job on
the job's own executor, as the UI and the schedule do, and say so: a cron job or an operator at
the terminal must not silently run a Ray job's steps on the scheduler box."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from tests.support.nodes import node_file
from tests.support.paths import REPO

LOCATION = """
from pathlib import Path

from dagster_graphbook import GraphbookWorkflow, build_definitions

HERE = Path(__file__).parent
defs = build_definitions(
    [
        GraphbookWorkflow(
            HERE / "pids.py", custom_nodes=[HERE / "pid_nodes.py"], executor={executor}
        )
    ],
    notes_dir=str(HERE / "notes"),
)
"""


def cli_project(root: Path, executor: str) -> Dict[str, str]:
    """A code location ``loc`` whose job ``pids`` runs on ``executor`` (Python source)."""
    shutil.copyfile(node_file("pid_steps"), (root / "pid_nodes.py"))
    shutil.copyfile(node_file("pid_graph"), (root / "pids.py"))
    (root / "loc.py").write_text(LOCATION.format(executor=executor))
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_GRAPHBOOK_STRICT"}
    env["CHECK_DIR"] = str(root)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(REPO)])
    return env


def cli_materialize(root: Path, env: Dict[str, str], home: str, *extra: str):
    cli = Path(sys.executable).parent / "dagster-graphbook"
    return subprocess.run(
        [str(cli), "materialize", "pids", "--module", "loc", "--dagster-home", home, *extra],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def cli_run_id(stdout: str) -> str:
    found = re.search(r"run (\S+): (SUCCESS|FAILURE)", stdout)
    assert found, stdout
    return found.group(1)


def cli_notes(home: str, run_id: str) -> List[dict]:
    import dagster as dg
    from upath import UPath

    from dagster_graphbook.store.versions import read_notes, stored_notes_path

    key = dg.AssetKey(["pids", "Check"])
    with dg.DagsterInstance.from_config(home) as instance:
        records = instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
    for record in records:
        materialization = record.asset_materialization
        if materialization is not None and materialization.asset_key == key:
            stored = stored_notes_path(materialization.metadata)
            assert stored is not None
            return read_notes(UPath(stored), key, None)
    raise AssertionError(f"run {run_id} did not materialize {key}")


def test_materialize_runs_a_job_on_its_multiprocess_executor_and_says_so(tmp_path, dagster_home):
    """A job defined with ``executor="multiprocess"``: each step in a process of its own (it ran
    both in the CLI's process), and the CLI says where before the run."""
    env = cli_project(tmp_path, '"multiprocess"')
    done = cli_materialize(tmp_path, env, dagster_home, "--no-progress")
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    notes = cli_notes(dagster_home, cli_run_id(done.stdout))
    assert len(notes) == 3
    assert {n["numbers_pid"] for n in notes} != {n["check_pid"] for n in notes}, notes
    assert "job pids: steps run on the job's executor 'multiprocess'" in done.stderr, said
