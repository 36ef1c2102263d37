"""``graphbook_executor``'s multiprocess runs from the preloaded forkserver: each step process
sees the run's environment and current directory as they are now (as spawn would give them),
whoever started the forkserver; Dagster's multiprocess settings still apply. Real runs."""

from __future__ import annotations

import os

ENV_NODES = """
    import os

    from graphbook import param, source, step


    @step("E/Env")
    @source()
    @param("out", "string")
    def env(ctx):
        with open(ctx.out, "w") as f:
            f.write(os.environ.get("GRAPHBOOK_FORKSERVER_TEST_VAR", "<unset>"))
        yield {"out": {"pid": os.getpid()}}
"""


def test_launchpad_multiprocess_sees_env_vars_set_after_the_forkserver_started(tmp_path, run_wf):
    """A run in a process whose forkserver was started by an earlier run: the step process must
    see the environment the run's process has now (as spawn would give it), not the forkserver's
    from its start."""
    from tests.conftest import step_node, write_nodes, write_workflow

    nodes = write_nodes(tmp_path / "nodes", "env_nodes.py", ENV_NODES)
    cfg = {
        "execution": {"config": {"multiprocess": {"max_concurrent": 1, "retries": {"enabled": {}}}}}
    }
    outs = []
    os.environ.pop("GRAPHBOOK_FORKSERVER_TEST_VAR", None)
    try:
        for k, value in enumerate(["first", "second"]):
            os.environ["GRAPHBOOK_FORKSERVER_TEST_VAR"] = value
            out = tmp_path / f"env{k}.txt"
            wf = write_workflow(
                tmp_path, f"env{k}", [step_node("1", "Env", {"out": str(out)}, source=True)], []
            )
            run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
            assert run.success, run.failure
            outs.append(out.read_text())
    finally:
        os.environ.pop("GRAPHBOOK_FORKSERVER_TEST_VAR", None)
    assert outs == ["first", "second"], outs


def test_launchpad_multiprocess_keeps_max_concurrent_and_tag_limits(tmp_path, run_wf):
    """Property: max_concurrent, retries and tag_concurrency_limits named with multiprocess are
    accepted and the run succeeds from the forkserver."""
    from tests.conftest import step_node, write_nodes, write_workflow

    nodes = write_nodes(tmp_path / "nodes", "env_nodes.py", ENV_NODES)
    out = tmp_path / "env.txt"
    wf = write_workflow(
        tmp_path, "env", [step_node("1", "Env", {"out": str(out)}, source=True)], []
    )
    cfg = {
        "execution": {
            "config": {
                "multiprocess": {
                    "max_concurrent": 2,
                    "retries": {"enabled": {}},
                    "tag_concurrency_limits": [{"key": "x", "value": "y", "limit": 1}],
                }
            }
        }
    }
    run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
    assert run.success, run.failure
    assert out.exists()


CWD_NODES = """
    import os

    from graphbook import param, source, step


    @step("C/Cwd")
    @source()
    @param("out", "string")
    def cwd(ctx):
        with open(ctx.out, "w") as f:
            f.write(os.getcwd())
        yield {"out": {"pid": os.getpid()}}
"""


def test_launchpad_multiprocess_steps_run_in_the_runs_current_directory(tmp_path, run_wf):
    """Two launchpad-multiprocess runs from one process, the second after a chdir: its step
    process must run in the directory the run's process is in now (spawn's behaviour), not the
    one the forkserver started in."""
    from tests.conftest import step_node, write_nodes, write_workflow

    nodes = write_nodes(tmp_path / "nodes", "cwd_nodes.py", CWD_NODES)
    cfg = {"execution": {"config": {"multiprocess": {}}}}
    dirs = [tmp_path / "a", tmp_path / "b"]
    seen = []
    old = os.getcwd()
    try:
        for k, folder in enumerate(dirs):
            folder.mkdir()
            os.chdir(folder)
            out = tmp_path / f"cwd{k}.txt"
            wf = write_workflow(
                tmp_path, f"cwd{k}", [step_node("1", "Cwd", {"out": str(out)}, source=True)], []
            )
            run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
            assert run.success, run.failure
            seen.append(out.read_text())
    finally:
        os.chdir(old)
    assert seen == [str(d) for d in dirs], seen


def test_multiprocess_run_sees_env_set_after_something_else_started_the_forkserver(
    tmp_path, run_wf, monkeypatch
):
    """``forkserver_with_this_environment`` records the environment at the first run's executor
    start and compares later runs with it; a forkserver started earlier by other code in the
    process (a loader with start_method forkserver, a library's multiprocessing pool; Python
    3.14's default start method) is taken as started with the run's environment, so the step
    process sees the environment from before the run's process changed it."""
    import multiprocessing

    from dagster_graphbook.defs import executor
    from tests.conftest import step_node, write_nodes, write_workflow

    # as in a process where no run started the forkserver yet (one already running, started
    # by an earlier test, was started with another environment: the case tested too)
    monkeypatch.setattr(executor, "_FORKSERVER_ENV", None, raising=False)
    os.environ["GRAPHBOOK_FORKSERVER_TEST_VAR"] = "before"
    try:
        ctx = multiprocessing.get_context("forkserver")
        proc = ctx.Process(target=os.getpid)
        proc.start()
        proc.join(30)
        os.environ["GRAPHBOOK_FORKSERVER_TEST_VAR"] = "after"
        nodes = write_nodes(tmp_path / "nodes", "env_nodes.py", ENV_NODES)
        out = tmp_path / "env.txt"
        wf = write_workflow(
            tmp_path, "env", [step_node("1", "Env", {"out": str(out)}, source=True)], []
        )
        cfg = {"execution": {"config": {"multiprocess": {}}}}
        run = run_wf(wf, [nodes], executor="multiprocess", run_config=cfg)
        assert run.success, run.failure
        seen = out.read_text()
    finally:
        os.environ.pop("GRAPHBOOK_FORKSERVER_TEST_VAR", None)
    assert seen == "after", f"the step process saw GRAPHBOOK_FORKSERVER_TEST_VAR={seen!r}"
