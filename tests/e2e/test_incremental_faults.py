"""Incremental runs under faults (docs/incremental.md): a store that is damaged, missing its
files, read-only or shared by two runs at once never fails a run nor gives a stale note, and a
run killed mid-step leaves nothing a later run would trust.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, List

import dagster as dg
import pytest

from tests.e2e.test_incremental import NODES, STEPS, WORKFLOW, Day, _computed, _meta, demo
from tests.support.mounts import can_make_read_only, read_only_switch
from tests.support.nodes import copy_nodes, node_source
from tests.support.paths import REPO
from tests.support.workflows import write_nodes

__all__ = ["demo"]  # the fixture, shared with test_incremental
pytestmark = pytest.mark.xdist_group("incremental_demo")


def _packs(notes: Path, step: str) -> List[Path]:
    return sorted((notes / "incremental" / "nightly_shapes" / step).rglob("*.pack"))


def _warnings(run: Any) -> List[str]:
    with dg.DagsterInstance.from_config(run.dagster_home) as instance:
        return [
            e.user_message
            for e in instance.all_logs(run.run_id)
            if e.level >= 30 and "incremental" in e.user_message
        ]


def test_a_damaged_pack_and_a_deleted_output_file_are_misses_with_a_warning(demo, tmp_path):
    day = Day(tmp_path, 20)
    day.add(20)
    first = demo(day)
    (pack,) = _packs(tmp_path / "notes", "ClassifyShapes")
    pack.write_bytes(b"not a pack" + pack.read_bytes()[100:])  # damaged on disk
    lost = Path(first["SaveResized"]["out"][0]["output_path"])
    lost.unlink()  # a file SaveResized wrote, deleted since

    second = demo(day)
    meta = _meta(second)
    assert meta["ClassifyShapes"]["notes_computed"] == 20  # nothing of the damaged pack trusted
    assert meta["SaveResized"]["notes_computed"] == 1  # the note whose file is gone
    assert meta["SaveResized"]["files_written"] == 1 and lost.is_file()
    said = _warnings(second)
    assert any(str(pack) in w and "damaged" in w for w in said), said
    assert second.notes == first.notes


def test_a_read_only_store_runs_without_reuse_and_says_so(demo, tmp_path):
    if not can_make_read_only(tmp_path):
        pytest.skip("cannot make a folder read-only here (no bind mounts)")
    day = Day(tmp_path, 20)
    day.add(20)
    first = demo(day)
    with read_only_switch(tmp_path / "notes" / "incremental") as (freeze, thaw):
        freeze()
        second = demo(day)
        thaw()
    meta = _meta(second)
    assert _computed(meta) == {s: meta[s]["notes_computed"] for s in STEPS}
    assert meta["ClassifyShapes"]["notes_computed"] == 20
    assert all(meta[s]["notes_reused"] == 0 for s in STEPS)
    said = _warnings(second)
    assert any("takes no file" in w and "reuses and records nothing" in w for w in said), said
    assert second.notes == first.notes


def _killable_run(tmp_path: Path, home: Path, kill_at: str) -> subprocess.CompletedProcess:
    """The Numbers -> Square workflow run incrementally in a process of its own (in process:
    the run is that process)."""
    code = f"""
import json, sys
from dagster_graphbook import run_workflow
run = run_workflow(
    {str(tmp_path / "killed.json")!r}, [{str(tmp_path / "nodes")!r}],
    {{"Square.log": {str(tmp_path / "seen.txt")!r}}},
    dagster_home={str(home)!r}, notes_dir={str(tmp_path / "notes")!r},
    runtime={{"incremental": True}},
)
print(json.dumps({{"ok": run.success, "y": [n["y"] for n in run.notes["Square"]["out"]]}}))
"""
    env = {**os.environ, "KILL_AT": kill_at, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180
    )


def test_a_run_killed_mid_step_leaves_nothing_a_later_run_trusts(tmp_path, dagster_home):
    from tests.support.workflows import edge, step_node, write_workflow

    copy_nodes(tmp_path / "nodes", "killed_nodes.py", "incremental_killed")
    write_workflow(
        tmp_path,
        "killed",
        [step_node("1", "Numbers", source=True), step_node("2", "Square")],
        [edge("1", "out", "2")],
    )
    killed = _killable_run(tmp_path, Path(dagster_home), kill_at="25")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    seen = (tmp_path / "seen.txt").read_text().split()
    assert 20 <= len(seen) < 40  # it died in its third batch, two of them done
    assert list((tmp_path / "notes").rglob("*.pack")) == []
    (tmp_path / "seen.txt").unlink()

    again = _killable_run(tmp_path, Path(dagster_home), kill_at="")
    assert again.returncode == 0, again.stderr[-2000:]
    said = json.loads(again.stdout.strip().splitlines()[-1])
    assert said == {"ok": True, "y": [x * x for x in range(40)]}
    assert len((tmp_path / "seen.txt").read_text().split()) == 40  # every note computed


def test_two_runs_of_the_same_day_at_once_both_succeed(project, tmp_path):
    day = Day(tmp_path, 20)
    day.add(20)
    home = tmp_path / "home"

    def cli() -> subprocess.Popen:
        sets = {
            "IncomingImages.folder": str(day.folder),
            "ShapesModel.checkpoint": str(project["root"] / "models" / "shapes_cnn.pt"),
            "SaveResized.output_dir": str(tmp_path / "outputs"),
        }
        args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
        return subprocess.Popen(
            [sys.executable, "-m", "dagster_graphbook.cli", "run", str(WORKFLOW)]
            + ["--custom-nodes", str(NODES), "--incremental", "--dagster-home", str(home)]
            + ["--no-progress", *args],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    runs = [cli(), cli()]
    said = [r.communicate(timeout=300) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], [s[1][-2000:] for s in said]
    notes = home / "storage" / "graphbook"
    assert len(_packs(notes, "ClassifyShapes")) == 2  # each run recorded its own
    third = cli()
    out, err = third.communicate(timeout=300)
    assert third.returncode == 0, err[-2000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (latest, *_) = instance.get_run_records()
        logs = [e.user_message for e in instance.all_logs(latest.dagster_run.run_id)]
    assert any("ClassifyShapes" in m and "20 notes reused" in m for m in logs), logs


def test_a_stream_whose_notes_reach_two_steps_runs_them_whole_and_says_why(tmp_path, run_wf):
    """Streamed, Letters -> A -> (B, C): B and C change the same dicts, so a full run's notes
    carry both changes. Reusing copies would not: incremental is off for the stream, said once
    per step, and the notes are a full run's."""
    from tests.support.workflows import edge, step_node, write_workflow

    copy_nodes(tmp_path / "nodes", "fanout_nodes.py", "incremental_fanout")
    workflow = write_workflow(
        tmp_path,
        "fanout",
        [
            step_node("1", "Letters", source=True),
            step_node("2", "Mark", {"key": "a"}, label="A"),
            step_node("3", "Mark", {"key": "b"}, label="B"),
            step_node("4", "Mark", {"key": "c"}, label="C"),
        ],
        [edge("1", "out", "2"), edge("2", "out", "3"), edge("2", "out", "4")],
    )
    kwargs = dict(streaming=True, notes_dir=str(tmp_path / "notes"))
    full = run_wf(workflow, [tmp_path / "nodes"], **kwargs)
    runs = [run_wf(workflow, [tmp_path / "nodes"], runtime={"incremental": True}, **kwargs)]
    runs.append(run_wf(workflow, [tmp_path / "nodes"], runtime={"incremental": True}, **kwargs))
    assert all(r.success for r in [full, *runs])
    assert [r.notes for r in runs] == [full.notes, full.notes]
    said = _warnings(runs[1])
    assert any("incremental is off in this stream" in w and "reach several" in w for w in said)
    assert not (tmp_path / "notes" / "incremental").exists()


def test_a_default_parameters_file_a_subpackage_helper_and_an_editors_lock_file(tmp_path, run_wf):
    """Changes the key must see though nothing in the run's config names them: the file a
    parameter left at its class default names, and a helper in a subpackage of the node folder;
    and an editor's lock file (a dangling ``.#nodes.py`` link) fails nothing."""
    from tests.support.workflows import edge, step_node, write_workflow

    table = tmp_path / "table.txt"
    table.write_text("A")
    nodes = tmp_path / "nodes"
    write_nodes(
        nodes, "look_nodes.py", node_source("incremental_lookup").replace("TABLE", str(table))
    )
    write_nodes(nodes / "lib", "__init__.py", "")
    write_nodes(nodes / "lib", "calc.py", "def factor():\n    return 10\n")
    (nodes / ".#look_nodes.py").symlink_to("user@host.1234:1700000000")  # Emacs's lock
    workflow = write_workflow(
        tmp_path,
        "look",
        [step_node("1", "Numbers", source=True), step_node("2", "Look")],
        [edge("1", "out", "2")],
    )

    def ys() -> List[str]:
        run = run_wf(
            workflow, [nodes], notes_dir=str(tmp_path / "notes"), runtime={"incremental": True}
        )
        assert run.success, run.failure
        return [n["y"] for n in run.notes["Look"]["out"]]

    assert ys() == ["A0", "A10", "A20"]
    time.sleep(0.01)
    table.write_text("B")  # the default parameter's file
    assert ys() == ["B0", "B10", "B20"]
    (nodes / "lib" / "calc.py").write_text("def factor():\n    return 1000\n")
    assert ys() == ["B0", "B1000", "B2000"]
