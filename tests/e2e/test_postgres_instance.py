"""The docs' Postgres instance (docs/deploying.md, "A production deployment") as a user meets it,
in seconds, on a real PostgreSQL cluster of the test's own (tests/e2e/production_parts.py): the
docs' dagster.yaml block read from the page, the webserver started as the page starts it.

Before: with dagster 1.13.27's SQLAlchemy 2.1, the block's ``postgres_db:`` fields made a
``postgresql://`` URL whose driver is psycopg 3: the instance failed to load (``No module named
'psycopg'``); the CLI on a stopped database printed 183 lines and 3 chained tracebacks; a launch
through the webserver right after a database restart answered HTTP 500 and left a run that never
ran."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator

import dagster as dg
import pytest

from tests.e2e import production_parts as parts
from tests.e2e.test_documented_examples import doc_section
from tests.support.paths import REPO
from tests.support.webserver import serve_webserver

pytest.importorskip("dagster_postgres", reason="needs dagster-postgres (the postgres extra)")
try:
    parts.postgres_bin()
except parts.PartUnavailable as exc:
    pytest.skip(str(exc), allow_module_level=True)


@pytest.fixture(scope="module")
def pg() -> Iterator[parts.Postgres]:
    with parts.postgres_cluster() as cluster:
        yield cluster


@pytest.fixture
def home(tmp_path: Path, pg: parts.Postgres, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An instance folder holding the docs' dagster.yaml, its variables naming ``pg``."""
    for name, value in pg.instance_env().items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "dagster.yaml").write_text(parts.documented_instance_yaml())
    return folder


@dg.op
def count() -> int:
    return 3


@dg.job
def tiny() -> None:
    count()


def test_the_docs_dagster_yaml_opens_a_postgres_instance_that_stores_a_run_and_its_events(home):
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        result = tiny.execute_in_process(instance=instance)
        assert result.success
    # read back through a new instance, as another process would
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(result.run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        kinds = [e.dagster_event.event_type for e in instance.all_logs(result.run_id)]
        assert kinds[0] == dg.DagsterEventType.RUN_START, kinds
        assert kinds[-1] == dg.DagsterEventType.RUN_SUCCESS, kinds
        assert {dg.DagsterEventType.STEP_OUTPUT, dg.DagsterEventType.STEP_SUCCESS} <= set(kinds)


CLI_COMMANDS = {
    "run": ["run", "workflows/sample.json", "--custom-nodes", "custom_nodes/sample"],
    "materialize": ["materialize", "sample", "--module", "definitions"],
}


@pytest.mark.parametrize("command", sorted(CLI_COMMANDS))
def test_a_cli_run_on_a_stopped_instance_database_says_so_in_one_line(home, pg, command):
    """Exit 1 and one line naming the database (no password) and what to do: no traceback, no
    retry warnings."""
    env = {**os.environ, "DAGSTER_PG_PASSWORD": "s3cret-pw", "PYTHONPATH": str(REPO)}
    env.pop("DAGSTER_GRAPHBOOK_DEBUG", None)
    pg.stop("fast")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dagster_graphbook.cli", *CLI_COMMANDS[command]]
            + ["--dagster-home", str(home)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        pg.start()
    said = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1, said
    assert len(said) == 1, "\n".join(said)
    line = said[0]
    assert f"postgres@127.0.0.1:{pg.port}/dagster" in line, line
    assert "Connection refused" in line and str(home / "dagster.yaml") in line, line
    assert "start the database" in line and "s3cret-pw" not in line, line


LAUNCH_QUEUED = "query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"


def _documented_webserver_env() -> Dict[str, str]:
    """The docs' ``dagster-webserver`` command's database options, as the environment variables
    dagster-webserver reads for them (tests/conftest.py's ``serve_webserver`` starts it)."""
    _, commands = doc_section("deploying.md", "## A production deployment")
    (line,) = [c for c in commands if c.startswith("dagster-webserver ")]
    options = dict(re.findall(r"--(db-[a-z-]+) (\S+)", line))
    assert options, f"the docs start dagster-webserver with no database option: {line}"
    return {f"DAGSTER_WEBSERVER_{k.upper().replace('-', '_')}": v for k, v in options.items()}


@pytest.mark.ui
def test_the_docs_webserver_launches_right_after_postgres_restarts(home, pg, tmp_path):
    """The first launches after ``pg_ctl stop -m immediate`` and a start, no read first, each
    queue their run (the daemon would start them): none answers HTTP 500 or leaves a run that
    never runs."""
    (tmp_path / "tiny_location.py").write_text(
        "import dagster as dg\n\n\n"
        "@dg.op\ndef count() -> int:\n    return 3\n\n\n"
        "@dg.job\ndef tiny() -> None:\n    count()\n\n\n"
        "defs = dg.Definitions(jobs=[tiny])\n"
    )
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n"
        "  - python_file:\n"
        f"      relative_path: {tmp_path / 'tiny_location.py'}\n"
        "      location_name: graphbook\n"
        f"      working_directory: {REPO}\n"
    )
    with serve_webserver(workspace, home, None, env=_documented_webserver_env()) as web:
        web.launch("tiny", {})  # the webserver's connections are open, in its pools
        with dg.DagsterInstance.from_config(str(home)) as instance:
            runs_before = len(instance.get_runs())
        pg.stop("immediate")
        pg.start()
        after = [web.launch("tiny", {}) for _ in range(3)]
        time.sleep(0.5)
        statuses = [web.graphql(LAUNCH_QUEUED, {"id": r})["runOrError"] for r in after]
        assert statuses == [{"status": "QUEUED"}] * 3, statuses
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert len(instance.get_runs()) == runs_before + 3  # no run half-launched
