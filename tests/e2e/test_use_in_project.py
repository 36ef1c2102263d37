"""README's "Use it in your project", run as written from an empty folder.

The section's files and commands are read from the README's code blocks, so the two cannot
drift. The package is installed as a user installs it: a wheel (not editable) into a fresh venv.
Only the two ``pip install`` lines are replaced, so the test needs no network: the package line by
``pip install --no-deps`` of a wheel built from this checkout, the torch line by nothing. The
dependencies (dagster, torch, dagster-dg-cli, ...) come from this test's own environment through
a ``.pth`` line naming its site-packages: a ``.pth`` line adds that folder to ``sys.path``
without running the ``.pth`` files inside it, so this checkout's editable install does not leak
in (checked: ``dagster_graphbook`` imports from the new venv). ``dg`` and ``dagster`` get
launchers in the new venv's ``bin`` (pip writes those when it installs them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import dagster as dg
import pytest

from tests.support.paths import REPO
from tests.support.shared_inputs import once_per_run

SECTION = "## Use it in your project"
LAUNCHERS = {"dg": "dagster_dg_cli.cli", "dagster": "dagster._cli"}


def readme_section() -> Tuple[Dict[str, str], List[List[str]]]:
    """The section's files (a block whose first line is ``# <path>``) and its bash blocks."""
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    files: Dict[str, str] = {}
    bash: List[List[str]] = []
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.S):
        if lang == "bash":
            bash.append([line for line in body.splitlines() if line.strip()])
        else:
            first, rest = body.split("\n", 1)
            files[first.removeprefix("# ").strip()] = rest
    return files, bash


SETUP = """
import os, sys
from pathlib import Path

files, site, launchers = {files!r}, {site!r}, {launchers!r}
venv = Path(".venv")
(packages,) = venv.glob("lib/python*/site-packages")
(packages / "zz_test_dependencies.pth").write_text(site + "\\n")
for name, module in launchers.items():
    path = venv / "bin" / name
    body = f"import sys\\nfrom {{module}} import main\\nsys.exit(main())\\n"
    path.write_text(f"#!{{venv.resolve()}}/bin/python\\n{{body}}")
    path.chmod(0o755)
for name, text in files.items():
    Path(name).parent.mkdir(parents=True, exist_ok=True)
    Path(name).write_text(text)
"""


@pytest.mark.long  # ~30 s: handed out early
def test_readme_recipe_from_an_empty_folder_with_a_wheel(tmp_path, wheel):
    files, bash = readme_section()
    assert set(files) == {"pyproject.toml", "photos/definitions.py"}, files
    install, project = bash
    pip_lines = [line for line in install if line.startswith("pip install")]
    assert [("torch" in p, "dagster-graphbook" in p) for p in pip_lines] == [
        (True, False),
        (False, True),
    ], pip_lines
    replaced = {
        pip_lines[0]: "true  # torch: from the test's environment (.pth)",
        pip_lines[1]: f"pip install --no-deps --no-index -q {wheel}",
    }
    setup = tmp_path / "setup.py"
    site = sysconfig.get_paths()["purelib"]
    setup.write_text(SETUP.format(files=files, site=site, launchers=LAUNCHERS))
    check = "python -c \"import dagster_graphbook as d; print('GB_FILE=' + d.__file__)\""
    script = "\n".join(
        [
            "set -euxo pipefail",
            *(replaced.get(line, line) for line in install),
            f"{sys.executable} {setup}  # the README's files, the .pth, dg/dagster launchers",
            *project,
            check,
        ]
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    tools = tmp_path / "tools"  # `python` is this interpreter's base Python, nothing else
    tools.mkdir()
    (tools / "python").symlink_to(os.path.realpath(sys._base_executable))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DAGSTER_HOME", "DAGSTER_GRAPHBOOK_STRICT")
    }
    env["PATH"] = f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin"  # not this checkout's .venv/bin
    done = subprocess.run(
        ["bash", "-c", script], cwd=empty, env=env, capture_output=True, text=True, timeout=600
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-6000:]

    project_dir = empty / "photos"
    (imported,) = re.findall(r"^GB_FILE=(.*)$", done.stdout, re.M)
    assert Path(imported).is_relative_to(project_dir / ".venv"), imported  # the wheel's copy
    assert not list((project_dir / ".venv").glob("lib/python*/site-packages/__editable__*"))
    assert "run " in said and ": SUCCESS in" in said  # dagster-graphbook run
    assert "All definitions loaded successfully" in said  # dg check defs
    assert "my_flow/Double" in said and "my_flow/Numbers" in said  # dg list defs
    assert "does not match" not in said  # Dagster's code location name warning
    with dg.DagsterInstance.from_config(str(project_dir / ".dagster_home")) as instance:
        # what `dg dev` opens: the scaffold wrote the one-second run queue
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # type: ignore[attr-defined]
        runs = instance.get_runs()
        assert [(r.job_name, r.status) for r in runs] == [("my_flow", dg.DagsterRunStatus.SUCCESS)]
        materialized = instance.get_latest_materialization_event(dg.AssetKey(["my_flow", "Double"]))
        assert materialized.asset_materialization.metadata["dagster/row_count"].value == 10


# The README's project, made with this checkout's package (PYTHONPATH) instead of a wheel: the
# checks below run its commands one by one, as a user does after following the section.
def _env(home: Optional[Path], **extra: str) -> Dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DAGSTER_HOME", "DAGSTER_GRAPHBOOK_STRICT", "DAGSTER_GRAPHBOOK_DEBUG")
    }
    env["VIRTUAL_ENV"] = sys.prefix
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if home is not None:
        env["DAGSTER_HOME"] = str(home)
    return {**env, **extra}


def _cli(
    args: List[str], cwd: Path, home: Optional[Path], **extra: str
) -> subprocess.CompletedProcess:
    """``dg``, ``dagster`` or ``dagster-graphbook`` of this environment; the caller judges the
    exit code."""
    exe = Path(sys.executable).parent / args[0]
    return subprocess.run(
        [str(exe), *args[1:]],
        cwd=cwd,
        env=_env(home, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def readme_project(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The section's files, then its commands up to and including ``dg scaffold`` and the
    instance folder's ``mkdir`` (run by bash as written; ``$DAGSTER_HOME`` is not set yet when
    it scaffolds). Made once per test run and copied into each test's folder (the tests edit
    their copy): what it writes holds no path of its own, and each ``dg scaffold`` costs seconds
    of CPU."""

    def make(folder: Path) -> None:
        files, (_, project) = readme_section()
        root = folder / "photos"
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        home_line = [line for line in project if line.startswith("export DAGSTER_HOME")]
        upto = project[: project.index(home_line[0]) + 1]
        assert any(line.startswith("dg scaffold") for line in upto), upto
        done = subprocess.run(
            ["bash", "-c", "\n".join(["set -euo pipefail", *upto])],
            cwd=root,
            env=_env(None),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert (root / "photos" / "defs" / "my_flow" / "workflow.json").is_file()

    made, _ = once_per_run(tmp_path_factory, "readme_project", make)
    root = tmp_path / "photos"
    shutil.copytree(made / "photos", root, symlinks=True)
    return root


def test_dagster_loads_the_readme_project_without_a_location_name_warning(readme_project):
    """``dagster dev`` (and ``dagster definitions validate``, the same load from [tool.dg])
    registered the location as 'photos.definitions' while Dagster's component tree called it
    'photos' (the folder), and warned on every load: 278 of 842 lines of a `dagster dev`."""
    home = readme_project / ".dagster_home"
    done = _cli(["dagster", "definitions", "validate"], readme_project, home)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "Validation successful for code location photos." in said, said
    assert "does not match" not in said, said


def test_dg_scaffold_writes_the_one_second_run_queue_before_any_dg_dev(readme_project):
    """The instance ``dg dev`` opens (``$DAGSTER_HOME`` = the project's .dagster_home, as the
    README sets it) has the 1 s queue from the scaffold on, not from the first `materialize`."""
    home = readme_project / ".dagster_home"
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # type: ignore[attr-defined]
    finally:
        instance.dispose()
    elsewhere = readme_project / "elsewhere_home"  # $DAGSTER_HOME set: that one is written
    comp = "dagster_graphbook.GraphbookWorkflowComponent"
    done = _cli(["dg", "scaffold", "defs", comp, "second"], readme_project, elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dequeue_interval_seconds: 1" in (elsewhere / "dagster.yaml").read_text()


FAILING_DOUBLE = """
    if os.environ.get("MAKE_DOUBLE_FAIL"):
        raise RuntimeError("Double told to fail")
    data["value"] = data["value"] * ctx.factor
"""


def test_materialize_from_failure_in_the_readme_project_reads_the_module_from_pyproject(
    readme_project,
):
    """No --module: the module is `dg`'s ([tool.dg.project] root_module + '.definitions'), from
    the project folder or below it; the natural guess --module photos.definitions loads too; a
    wrong module is one line naming what was tried."""
    home = readme_project / ".dagster_home"
    nodes = readme_project / "photos" / "defs" / "my_flow" / "nodes.py"
    text = nodes.read_text()
    line = '    data["value"] = data["value"] * ctx.factor\n'
    nodes.write_text("import os\n" + text.replace(line, FAILING_DOUBLE.lstrip("\n")))

    args = ["dagster-graphbook", "materialize", "my_flow", "--no-progress"]
    failed = _cli(args, readme_project, home, MAKE_DOUBLE_FAIL="1")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    (run_id,) = re.findall(r"^run (\S+): FAILURE", failed.stdout, re.M)

    below = readme_project / "photos" / "defs"
    resumed = _cli([*args, "--from-failure", run_id], below, home)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "SUCCESS" in resumed.stdout and "Double   out: 10 notes" in resumed.stdout

    guessed = _cli([*args, "--module", "photos.definitions"], readme_project, home)
    assert guessed.returncode == 0, guessed.stdout + guessed.stderr

    for module, named in (("photos.nope", "'photos.nope'"), ("photos", "'photos.definitions'")):
        wrong = _cli([*args, "--module", module], readme_project, home)
        assert wrong.returncode == 1, wrong.stdout + wrong.stderr
        assert "Traceback" not in wrong.stderr, wrong.stderr
        assert len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
        assert f"'{module}'" in wrong.stderr and named in wrong.stderr, wrong.stderr


def test_a_recorded_try_out_of_a_component_file_is_the_components_job(readme_project):
    """Every scaffolded component's file is workflow.json: a try-out was job `workflow`, and with
    --record it left assets workflow/* that no definition of the project has."""
    home = readme_project / ".dagster_home"
    folder = "photos/defs/my_flow"
    ran = _cli(
        ["dagster-graphbook", "run", f"{folder}/workflow.json", "--custom-nodes"]
        + [f"{folder}/nodes.py", "--record", "--no-progress"],
        readme_project,
        home,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    listed = _cli(["dg", "list", "defs", "--json"], readme_project, home)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    defined = {a["asset_key"] for a in json.loads(listed.stdout)["assets"]}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert [r.job_name for r in instance.get_runs()] == ["my_flow"]
        recorded = {key.to_user_string() for key in instance.get_asset_keys()}
    assert recorded == {"my_flow/Numbers", "my_flow/Double"} and recorded <= defined, recorded

    checked = _cli(
        ["dagster-graphbook", "validate", f"{folder}/workflow.json", "--custom-nodes"]
        + [f"{folder}/nodes.py"],
        readme_project,
        home,
    )
    assert checked.returncode == 0 and "asset my_flow/Double" in checked.stdout, checked.stdout
