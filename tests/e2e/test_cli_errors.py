"""User errors and failed runs through the real CLI and a ``{partition_key}`` that no
run fills in (21.4), as a user meets them: subprocesses, real files, a real instance.

Before: ``--set SplitByScore.threshold=high`` ended in a 28-line traceback naming Dagster's op path
(``root:ops:wf__SplitByScore:config:threshold``); a failing item's error came out about 4 times in
130 lines, ``g.run()``'s 3 times; an unpartitioned run of a workflow reading
``data/{partition_key}`` failed late with ``FileNotFoundError: ... 'data/{partition_key}'``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import dagster as dg
import pytest

from tests.support.nodes import node_file, node_source
from tests.support.paths import REPO

CLI = [sys.executable, "-m", "dagster_graphbook.cli"]
DAGSTER = str(Path(sys.executable).parent / "dagster")


def _workflow(path: Path, nodes: List[tuple], edges: List[tuple] = ()) -> None:
    """A workflow file of ``(id, step, {param: value})`` nodes and ``(source, target)`` edges."""
    path.write_text(
        json.dumps(
            {
                "nodes": [
                    {
                        "id": nid,
                        "type": "step",
                        "data": {
                            "name": name,
                            "parameters": {k: {"value": v} for k, v in ps.items()},
                        },
                    }
                    for nid, name, ps in nodes
                ],
                "edges": [
                    {"source": a, "sourceHandle": "out", "target": b, "targetHandle": "in"}
                    for a, b in edges
                ],
            }
        )
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder: their nodes, two workflow files, a code location module for them."""
    (tmp_path / "nodes").mkdir()
    shutil.copyfile(node_file("photo_errors"), (tmp_path / "nodes" / "photo.py"))
    _workflow(
        tmp_path / "scores.json",
        [("1", "Images", {}), ("2", "SplitByScore", {})],
        [("1", "2")],
    )
    _workflow(tmp_path / "day.json", [("1", "DayImages", {"folder": "data/{partition_key}"})])
    (tmp_path / "data" / "2025-06-01").mkdir(parents=True)
    (tmp_path / "data" / "2025-06-01" / "a.png").write_bytes(b"x")
    (tmp_path / "location.py").write_text(
        "from dagster_graphbook import GraphbookWorkflow, build_definitions, daily_partitions\n"
        "defs = build_definitions([\n"
        "    GraphbookWorkflow('scores.json', custom_nodes=['nodes']),\n"
        "    GraphbookWorkflow('day.json', custom_nodes=['nodes']),\n"
        "    GraphbookWorkflow('day.json', name='daily', custom_nodes=['nodes'],\n"
        "                      partitions_def=daily_partitions('2025-06-01')),\n"
        "    GraphbookWorkflow('day.json', name='plain_executor', custom_nodes=['nodes'],\n"
        "                      executor='in_process'),\n"
        "])\n"
    )
    shutil.copyfile(node_file("cli_graph"), (tmp_path / "my_graph.py"))
    return tmp_path


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_GRAPHBOOK_DEBUG"}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def _cli(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args, "--dagster-home", str(folder / "home")],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(**env),
    )


def _lines(proc: subprocess.CompletedProcess) -> List[str]:
    return (proc.stdout + proc.stderr).strip().splitlines()


def _runs(folder: Path) -> list:
    with dg.DagsterInstance.from_config(str(folder / "home")) as instance:
        return instance.get_runs()


RUN = ["run", "scores.json", "--custom-nodes", "nodes"]
MATERIALIZE = ["materialize", "scores", "--module", "location"]


@pytest.mark.parametrize(
    "command, what",
    [
        (RUN, "workflow {wf}"),
        (RUN + ["--streaming"], "workflow {wf}"),
        (MATERIALIZE, "job scores (workflow {wf})"),
    ],
    ids=["run", "run-streaming", "materialize"],
)
def test_set_value_of_the_wrong_type_is_one_line_naming_file_and_step_param(project, command, what):
    wf = project / "scores.json"
    proc = _cli(project, *command, "--set", "SplitByScore.threshold=high")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    head = f"dagster-graphbook {' '.join(command[:2])}: {what.format(wf=wf)}"
    assert _lines(proc) == [f"{head}: SplitByScore.threshold takes a number, not 'high'"]
    # a parameter the step has not, a setting of the wrong kind: each said as STEP.PARAM
    proc = _cli(
        project,
        *command,
        "--set",
        "SplitByScore.thresold=0.5",
        "--set",
        "SplitByScore.runtime.on_item_error=ignore",
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert _lines(proc) == [
        f"{head}: 2 config errors:",
        "  - step 'SplitByScore' has no parameter 'thresold' (it has: runs, runtime, threshold)",
        "  - SplitByScore.runtime.on_item_error takes one of raise, skip, not 'ignore'",
    ]
    assert _runs(project) == []  # refused before any run


def test_step_typo_is_said_once_and_debug_shows_the_traceback(project):
    proc = _cli(project, *RUN, "--set", "SplitByScroe.threshold=1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out
    assert out.count("cannot set 'SplitByScroe.threshold'") == 1
    assert str(project / "scores.json") in out and len(_lines(proc)) <= 3
    assert all(line.count("dagster-graphbook run") <= 1 for line in _lines(proc))  # not glued
    for debug in (["--debug"], []):  # the flag, or the environment variable
        env = {} if debug else {"DAGSTER_GRAPHBOOK_DEBUG": "1"}
        proc = _cli(project, *debug, *RUN, "--set", "SplitByScroe.threshold=1", **env)
        assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr
        assert "cannot set 'SplitByScroe.threshold'" in proc.stderr


def test_missing_custom_nodes_folder_and_module_are_one_line(project):
    proc = _cli(project, "run", "scores.json", "--custom-nodes", "nodez")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert _lines(proc) == [
        f"dagster-graphbook run scores.json: workflow {project / 'scores.json'} is invalid:",
        f"  - custom nodes path {project / 'nodez'} does not exist",
    ]
    proc = _cli(project, "materialize", "scores", "--module", "locaton")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert _lines(proc) == [
        f"dagster-graphbook materialize scores: no code location module 'locaton' (--module) "
        f"in {project}: run from the project's folder, or name the module that holds its "
        "Definitions with --module"
    ]


HEADLINE = (
    "step 'SplitByScore' (node 2): failed on note 3 {'path': 'img3.png', 'score': 0.3}: "
    "ValueError: cannot score img3.png"
)


@pytest.mark.parametrize(
    "command",
    [RUN, RUN + ["--no-progress"], MATERIALIZE, MATERIALIZE + ["--no-progress"]],
    ids=["run", "run-no-progress", "materialize", "materialize-no-progress"],
)
def test_a_failing_item_is_said_once_with_where_the_full_log_is(project, command):
    proc = _cli(project, *command, "--set", "SplitByScore.threshold=-1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert out.count("cannot score img3.png") == 1, out  # was about 4 times in 130 lines
    assert HEADLINE in out and "Traceback" not in out and "Stack Trace" not in out
    line = (
        node_source("photo_errors")
        .splitlines()
        .index("        raise ValueError(f\"cannot score {data['path']}\")")
        + 1
    )
    assert out.count(f"at {project / 'nodes' / 'photo.py'}, line {line}, in split_by_score") == 1
    (run,) = _runs(project)
    assert f"full log (traceback included): run {run.run_id} in `DAGSTER_HOME=" in out
    assert len(_lines(proc)) <= 12, out


def test_where_a_failure_was_raised_is_the_users_line_not_a_librarys(project, run_wf):
    """The error raised inside the standard library (``json.loads``) is placed at the user's
    call, the innermost frame outside this package and installed or standard libraries."""
    run = run_wf(project / "scores.json", [project / "nodes"], {"SplitByScore.threshold": -2})
    assert not run.success
    line = (
        node_source("photo_errors")
        .splitlines()
        .index('        json.loads(data["path"])  # raises in the standard library')
    )
    headline, where = run.failure.splitlines()
    assert "failed on note 3" in headline and "JSONDecodeError" in headline
    assert where == f"    at {project / 'nodes' / 'photo.py'}, line {line + 1}, in split_by_score"


def test_graph_run_says_a_failure_once(project):
    """``python my_graph.py`` calling ``g.run()`` printed the failure 3 times."""
    proc = subprocess.run(
        [sys.executable, "my_graph.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(DAGSTER_HOME=str(project / "home")),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert out.count("cannot score img3.png") == 1, out
    assert "workflow my_graph failed: my_graph__SplitByScore: workflow 'my_graph', " in out
    (run,) = _runs(project)
    assert f"run {run.run_id} in `DAGSTER_HOME={project / 'home'} dagster dev`" in out
    assert "Stack Trace" not in out and len(_lines(proc)) <= 10, out


# ---------------------------------------------------------------------------------------------
# 21.4: {partition_key} in a run without a partition key


def test_unfilled_partition_key_is_refused_before_the_run(project):
    """``run`` of a workflow file and ``materialize`` of a code location job: refused in one line
    naming the file, STEP.PARAM and what to do, before any run (a function parameter holding
    the text is code, never filled in, so not named)."""
    wf = project / "day.json"
    for command, what in (
        (["run", "day.json", "--custom-nodes", "nodes"], f"workflow {wf}"),
        (["run", "day.json", "--custom-nodes", "nodes", "--streaming"], f"workflow {wf}"),
        (["materialize", "day", "--module", "location"], f"job day (workflow {wf})"),
    ):
        proc = _cli(project, *command)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert _lines(proc) == [
            f"dagster-graphbook {' '.join(command[:2])}: {what}: DayImages.folder "
            "'data/{partition_key}': this run has no partition key to fill in; "
            "set it (--set DayImages.folder=VALUE) or give the workflow partitions "
            "(partitions_def=, YAML partitions:) and run one"
        ]
        assert "FileNotFoundError" not in proc.stderr
    assert _runs(project) == []
    # the partitioned job asks for a day, whose key fills it in; a value set is taken as it is
    proc = _cli(project, "materialize", "daily", "--module", "location")
    (line,) = _lines(proc)
    assert proc.returncode == 1 and line.startswith(
        f"dagster-graphbook materialize daily: job daily (workflow {wf}) is partitioned: give a "
        "partition key (--partition 20"
    ), line
    proc = _cli(
        project, "materialize", "daily", "--module", "location", "--partition", "2025-06-01"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = _cli(
        project,
        "run",
        "day.json",
        "--custom-nodes",
        "nodes",
        "--set",
        "DayImages.folder=data/2025-06-01",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_unfilled_partition_key_fails_a_dagster_launched_run_at_its_start(project):
    """Launched by Dagster itself (``dagster job execute``, as the UI's run worker does): the
    run fails before any step starts, naming the file and STEP.PARAM; under an executor of
    Dagster's own, the step fails before its code runs, naming the same."""
    home = project / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    for job, before_any_step in (("day", True), ("plain_executor", False)):
        proc = subprocess.run(
            [DAGSTER, "job", "execute", "-m", "location", "-j", job],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
            env=_env(DAGSTER_HOME=str(home)),
        )
        assert proc.returncode != 0, proc.stdout + proc.stderr
        with dg.DagsterInstance.from_config(str(home)) as instance:
            (run,) = instance.get_runs(filters=dg.RunsFilter(job_name=job))
            assert run.status == dg.DagsterRunStatus.FAILURE
            kinds = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.RUN_FAILURE}
            kinds.add(dg.DagsterEventType.STEP_FAILURE)
            records = instance.get_records_for_run(run.run_id, of_type=kinds).records
        events = [r.event_log_entry.dagster_event for r in records]
        started = [e for e in events if e.event_type == dg.DagsterEventType.STEP_START]
        assert (started == []) == before_any_step
        errors = [
            e.event_specific_data.error.message  # the message, not the stack's code lines
            for e in events
            if e.event_specific_data and getattr(e.event_specific_data, "error", None)
        ]
        said = "DayImages.folder 'data/{partition_key}': this run has no partition key"
        assert errors and all(said in text for text in errors), errors
        assert not any("FileNotFoundError" in text for text in errors)
        if before_any_step:
            assert f"job day (workflow {project / 'day.json'})" in errors[0]
        else:
            assert "workflow 'plain_executor', step 'DayImages' (node 1)" in errors[0]
