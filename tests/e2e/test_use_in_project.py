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

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List, Tuple

import dagster as dg

from tests.conftest import REPO

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
    with dg.DagsterInstance.from_config(str(project_dir / ".dagster_home")) as instance:
        runs = instance.get_runs()
        assert [(r.job_name, r.status) for r in runs] == [("my_flow", dg.DagsterRunStatus.SUCCESS)]
        materialized = instance.get_latest_materialization_event(dg.AssetKey(["my_flow", "Double"]))
        assert materialized.asset_materialization.metadata["dagster/row_count"].value == 10
