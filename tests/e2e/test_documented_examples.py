"""The docs' complete examples, run as written: their code blocks are read from the page (a block
whose first line is ``# <file name>`` is that file; the bash block after them is the command),
so the page and what runs cannot drift."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import dagster as dg
import numpy as np
from upath import UPath

from dagster_graphbook.store.versions import read_notes, stored_notes_path
from tests.support.paths import REPO


def doc_section(page: str, heading: str) -> Tuple[Dict[str, str], List[str]]:
    """The files and the bash command lines of ``heading``'s section of ``docs/<page>``."""
    text = (REPO / "docs" / page).read_text()
    start = text.index(heading)
    level = heading.index(" ")  # a heading of this level or above ends the section
    following = re.compile(rf"\n#{{2,{level}}} ").search(text, start + len(heading))
    end = following.start() if following else len(text)
    files: Dict[str, str] = {}
    commands: List[str] = []
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.S):
        if lang == "bash":
            commands += [line for line in body.splitlines() if line.strip()]
        else:
            first, rest = body.split("\n", 1)
            files[first.removeprefix("# ").strip()] = rest
    return files, commands


def readme_opening() -> List[Tuple[str, str]]:
    """The ``(language, body)`` of each code block of the README before its first section."""
    text = (REPO / "README.md").read_text()
    return re.findall(r"```(\w+)\n(.*?)```", text[: text.index("\n## ")], re.S)


def run_commands(folder: Path, commands: List[str]) -> subprocess.CompletedProcess:
    """A section's bash lines in ``folder``, as a user runs them (a try-out beside it)."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_GRAPHBOOK_STRICT"}
    env["DAGSTER_HOME"] = str(folder / ".dagster_home")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-c", "\n".join(["set -euo pipefail", *commands])],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_readmes_opening_example_runs_as_a_dagster_job_before_the_two_commands(tmp_path):
    """The README's first code block, ``quickstart.py``, as written: the workflow runs as the
    Dagster job ``squares`` and prints its notes; the block after it holds the README's first
    commands, the nightly demo and the test suite."""
    (example, quickstart), (lang, commands) = readme_opening()
    assert example == "python" and lang == "bash", (example, lang)
    first, code = quickstart.split("\n", 1)
    assert first == "# quickstart.py", first
    assert [line.split("#")[0].strip() for line in commands.splitlines()] == [
        "bash scripts/demo.sh",
        "bash scripts/test.sh",
    ], commands
    (tmp_path / "quickstart.py").write_text(code)
    done = run_commands(tmp_path, ["python quickstart.py"])
    squares = [{"n": n, "square": n * n} for n in range(5)]
    assert f"True {squares}" in done.stdout, done.stdout + done.stderr


def test_the_authoring_guides_batch_step_with_load_fn_dump_fn_and_a_model_runs_as_written(
    tmp_path,
):
    """docs/authoring.md's complete batch step: a torch model resource built in the file,
    ``load_fn`` in the loader workers, ``dump_fn`` writing a .npy per note; every vector file
    written, recorded in the asset's metadata, and matching the note that names it."""
    files, commands = doc_section("authoring.md", "### A complete batch step")
    assert set(files) == {"embed_nodes.py", "embed_workflow.py"}, files
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    done = run_commands(tmp_path, commands)  # the try-out records beside it
    assert "Embed      out: 3 notes" in done.stdout, done.stdout + done.stderr

    vectors = sorted((tmp_path / "vectors").glob("*.npy"))
    assert [p.name for p in vectors] == ["0.npy", "1.npy", "2.npy"]
    tryouts = tmp_path / ".dagster_graphbook" / "tryouts"
    key = dg.AssetKey(["embed_workflow", "Embed"])
    with dg.DagsterInstance.from_config(str(tryouts)) as instance:
        event = instance.get_latest_materialization_event(key)
        assert event is not None and event.asset_materialization is not None
        metadata = event.asset_materialization.metadata
    assert metadata["files_written"].value == 3, metadata
    stored = stored_notes_path(metadata)
    assert stored is not None
    notes = read_notes(UPath(stored), key, None)
    assert [n["text"] for n in notes] == ["a red square", "a blue circle", "a green triangle"]
    for note in notes:
        vector = np.load(note["vector_path"])
        assert vector.shape == (4,) and vector.dtype == np.float32
        assert round(float(np.linalg.norm(vector)), 4) == note["norm"], note


def test_the_deploying_guides_no_op_compute_logs_block_leaves_no_log_files(tmp_path):
    """docs/deploying.md's ``compute_logs`` block that turns them off, as ``dagster.yaml``: a run
    leaves no ``compute_logs`` files in the instance's storage, where the same run without it
    leaves them (on whichever machine ran the step)."""
    from dagster_graphbook import run_workflow
    from tests.support.nodes import copy_nodes
    from tests.support.workflows import chain_workflow

    files, _ = doc_section("deploying.md", "### Compute logs: in the bucket, or off")
    nodes = copy_nodes(tmp_path / "nodes", "chain_nodes.py", "chain")
    workflow = chain_workflow(tmp_path, 2, "chain")
    logs = {}
    for name, settings in (("default", ""), ("off", files["dagster.yaml: no compute logs"])):
        home = tmp_path / name
        home.mkdir()
        (home / "dagster.yaml").write_text(settings)
        run = run_workflow(workflow, [nodes], dagster_home=str(home), executor="in_process")
        assert run.success, run.failure
        logs[name] = [p.name for p in (home / "storage").rglob("*") if "compute_logs" in str(p)]
    assert logs["default"] and not logs["off"], logs


def test_the_authoring_guides_editor_json_wires_the_model_resource_into_its_step(tmp_path):
    """docs/authoring.md's workflow JSON as written by hand (a resource node and the edge to the
    step parameter it feeds), with the guide's nodes: it loads, the resource is the job's
    Dagster resource, and the step runs with the model its ``value()`` built."""
    from dagster_graphbook import GraphbookWorkflow, build_definitions

    nodes, _ = doc_section("authoring.md", "### A complete batch step")
    files, commands = doc_section("authoring.md", "### The same workflow as editor JSON")
    assert set(files) == {"embed_workflow.json"}, files
    (tmp_path / "embed_nodes.py").write_text(nodes["embed_nodes.py"])
    (tmp_path / "embed_workflow.json").write_text(files["embed_workflow.json"])
    done = run_commands(tmp_path, commands)
    assert "Embed      out: 3 notes" in done.stdout, done.stdout

    spec = GraphbookWorkflow(tmp_path / "embed_workflow.json", [tmp_path / "embed_nodes.py"])
    job = build_definitions([spec], strict=True).resolve_job_def("embed_workflow")
    assert "embed_workflow__TinyEncoder" in job.resource_defs
    key = dg.AssetKey(["embed_workflow", "Embed"])
    with dg.DagsterInstance.from_config(str(tmp_path / ".dagster_graphbook" / "tryouts")) as inst:
        event = inst.get_latest_materialization_event(key)
        assert event is not None and event.asset_materialization is not None
        stored = stored_notes_path(event.asset_materialization.metadata)
    assert stored is not None
    notes = read_notes(UPath(stored), key, None)
    assert [n["text"] for n in notes] == ["a red square", "a blue circle", "a green triangle"]
    for note in notes:  # vectors of the resource's model (a step without it fails)
        vector = np.load(note["vector_path"])
        assert vector.shape == (4,) and round(float(np.linalg.norm(vector)), 4) == note["norm"]


def test_the_outputs_guides_atomic_path_dump_fn_writes_and_records_its_files(tmp_path, bucket):
    """docs/outputs.md's ``dump_fn`` that returns nothing and writes through ``atomic_path``:
    each PNG is written whole (no temporary file left) and recorded in the asset's metadata and
    manifest; with ``output_dir`` a bucket URL (moto's S3 server), the same files are objects
    there, recorded with their sizes."""
    from PIL import Image

    from dagster_graphbook.store.manifests import read_manifest

    files, commands = doc_section("outputs.md", "## Files from `dump_fn`: `atomic_path`")
    assert set(files) == {"swatch_nodes.py", "swatch_workflow.py"}, files
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    to_bucket = f"--set SaveSwatch.output_dir={bucket.url}/swatches"
    run_commands(tmp_path, commands)
    run_commands(tmp_path, [f"{commands[0].split('#')[0].strip()} {to_bucket}"])

    swatches = tmp_path / "swatches"
    assert sorted(p.name for p in swatches.iterdir()) == ["blue.png", "green.png", "red.png"]
    with Image.open(swatches / "red.png") as image:
        assert image.format == "PNG" and image.getpixel((0, 0)) == (255, 0, 0)
    objects = bucket.objects("swatches")
    assert sorted(objects) == ["swatches/blue.png", "swatches/green.png", "swatches/red.png"]
    key = dg.AssetKey(["swatch_workflow", "SaveSwatch"])
    with dg.DagsterInstance.from_config(str(tmp_path / ".dagster_graphbook" / "tryouts")) as inst:
        records = inst.fetch_materializations(key, limit=2).records  # newest first
        bucket_run, local_run = [r.asset_materialization.metadata for r in records]
    assert local_run["files_written"].value == 3
    listed = sorted(
        os.path.relpath(p, tmp_path) for p in read_manifest(local_run["files_manifest"].value)
    )
    assert listed == ["swatches/blue.png", "swatches/green.png", "swatches/red.png"]
    assert bucket_run["files_written"].value == 3
    assert bucket_run["files_bytes"].value == sum(objects.values())
    assert sorted(read_manifest(bucket_run["files_manifest"].value)) == sorted(
        f"{bucket.url}/{k}" for k in objects
    )


def test_the_incremental_guides_growing_folder_computes_only_the_new_file(tmp_path):
    """docs/incremental.md's complete example, as written: a folder that grows; the second run
    measures only the new file, ``--full`` all four again, and each run's notes are a full run's."""
    files, commands = doc_section("incremental.md", "## A complete example")
    assert set(files) == {"growing.py"}, files
    (tmp_path / "growing.py").write_text(files["growing.py"])
    run_commands(tmp_path, commands)
    said = {n: (tmp_path / f"{n}.txt").read_text() for n in ("first", "second", "third")}
    assert "large: 3 notes" in said["first"] and "small: 1 notes" in said["second"], said
    measure = dg.AssetKey(["growing", "Measure"])
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        records = instance.fetch_materializations(measure, limit=10).records
        runs = [(r.run_id, r.asset_materialization) for r in reversed(records)]
        logs = [e.user_message for e in instance.all_logs(runs[1][0])]
    counts = [
        (m.metadata["notes_computed"].value, m.metadata["notes_reused"].value) for _, m in runs
    ]
    assert counts == [(3, 0), (1, 3), (4, 0)]
    assert sum("measured" in line for line in logs) == 1  # on_item_batch saw the new file only
    said_reused = "step 'Measure' (node 1): incremental: 3 notes reused from runs"
    assert any(said_reused in line and "1 computed" in line for line in logs), logs


def test_the_authoring_guides_whole_graphbook_workflow_runs_its_day_as_written(tmp_path):
    """docs/authoring.md's ``run_days.py``: ``run_workflow`` given a whole ``GraphbookWorkflow``
    runs that day's partition of its job, with its tags, as a try-out beside the file."""
    files, commands = doc_section("authoring.md", "### A whole GraphbookWorkflow from Python")
    assert set(files) == {"run_days.py"} and commands == ["python run_days.py"], (files, commands)
    (tmp_path / "run_days.py").write_text(files["run_days.py"])
    done = run_commands(tmp_path, commands)
    notes = [{"day": "2025-06-01", "n": n} for n in range(3)]
    assert f"True {notes}" in done.stdout, done.stdout + done.stderr
    tryouts = tmp_path / ".dagster_graphbook" / "tryouts"
    with dg.DagsterInstance.from_config(str(tryouts)) as instance:
        [run] = instance.get_runs()
    assert run.job_name == "days"
    assert run.tags["dagster/partition"] == "2025-06-01" and run.tags["team"] == "ml"
