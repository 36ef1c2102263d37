"""The trust rule, tried as an attacker with Launchpad access: run config and partition keys never
become code. Each test launches a real run on a real instance with the attack and checks that the
attacker's code did not run (its marker file is absent) and that the refusal names the culprit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dagster as dg
import pytest
from conftest import edge, resource_node, step_node, write_nodes, write_workflow

from dagster_graphbook import GraphbookWorkflow, build_definitions

NODES = """
    from graphbook import step, source, param


    @step("Trust/Count")
    @source()
    def count(ctx):
        for i in range(3):
            yield {"out": {"i": i}}


    @step("Trust/Apply")
    @param("fn", "function")
    @param("label", "string", default="plain")
    def apply(ctx, data):
        data["y"] = ctx.fn(data["i"])
        data["label"] = ctx.label
    """

MINUS_ONE = "def fn(x):\n    return x - 1"


def _evil(marker: Path) -> str:
    """Function source that leaves ``marker`` behind when it is compiled (module-level code)."""
    return f"def fn(x):\n    return True\nopen({str(marker)!r}, 'w').write('pwned')\n"


@pytest.fixture
def nodes(tmp_path: Path) -> Path:
    return write_nodes(tmp_path / "trust_nodes", "trust_nodes.py", NODES)


def _text_into_apply(tmp_path: Path, name: str, *, overridable: bool = False) -> Path:
    apply = step_node("2", "Apply")
    if overridable:
        apply["data"]["parameters"]["fn"] = {"type": "function", "value": None, "overridable": True}
    text = resource_node("3", "Text", {"val": MINUS_ONE}, label="Code")
    return write_workflow(
        tmp_path,
        name,
        [step_node("1", "Count", source=True), apply, text],
        [edge("1", "out", "2"), edge("3", "resource", "2", "fn")],
    )


def test_text_resource_feeding_a_function_parameter_is_locked(tmp_path, nodes, run_wf):
    """13.2: run config edits a Text resource whose value a step compiles -> refused, nothing ran,
    and the refusal (raised while the resource is built) names resource, parameter and consumer."""
    marker = tmp_path / "pwned"
    wf = _text_into_apply(tmp_path, "text_code")
    attack = {"resources": {"text_code__Code": {"config": {"val": _evil(marker)}}}}
    run = run_wf(wf, custom_nodes=[nodes], run_config=attack)
    assert not run.success
    assert not marker.exists(), "the attacker's code ran"
    assert "resource 'Code' (node 3)" in run.failure, run.failure
    assert "parameter 'val'" in run.failure and "parameter 'fn' of node 2 (Apply)" in run.failure, (
        run.failure
    )
    assert "see the Dagster event log" not in run.failure
    # the workflow's own code still runs, and other steps' parameters stay editable
    run = run_wf(wf, custom_nodes=[nodes], params={"Apply.label": "edited"})
    assert run.success, run.failure
    assert [(n["y"], n["label"]) for n in run.notes["Apply"]["out"]] == [
        (-1, "edited"),
        (0, "edited"),
        (1, "edited"),
    ]
    # a workflow that marks the function parameter overridable lets run config edit the resource
    wf = _text_into_apply(tmp_path, "text_open", overridable=True)
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        run_config={
            "resources": {"text_open__Code": {"config": {"val": "def fn(x):\n    return x * 10"}}}
        },
    )
    assert run.success, run.failure
    assert [n["y"] for n in run.notes["Apply"]["out"]] == [0, 10, 20]


def test_text_resource_feeding_split_is_locked(tmp_path, nodes, run_wf):
    """13.2: the same attack through the built-in ``Split`` (``split_fn`` is typed 'resource')."""
    marker = tmp_path / "pwned"
    split = step_node("2", "Split", outputs=["A", "B"])
    text = resource_node(
        "3", "Text", {"val": "def even(note):\n    return note['i'] % 2 == 0"}, label="Rule"
    )
    wf = write_workflow(
        tmp_path,
        "split_code",
        [step_node("1", "Count", source=True), split, text],
        [edge("1", "out", "2"), edge("3", "resource", "2", "split_fn")],
    )
    run = run_wf(
        wf,
        custom_nodes=[nodes],
        run_config={"resources": {"split_code__Rule": {"config": {"val": _evil(marker)}}}},
    )
    assert not run.success and not marker.exists()
    assert (
        "resource 'Rule' (node 3)" in run.failure
        and "parameter 'split_fn' of node 2 (Split)" in run.failure
    ), run.failure
    run = run_wf(wf, custom_nodes=[nodes])
    assert run.success, run.failure
    assert [n["i"] for n in run.notes["Split"]["A"]] == [0, 2]


def test_cli_reports_the_resource_refusal(tmp_path, nodes, dagster_home):
    """13.5: the CLI prints the resource and parameter refused during resource initialisation."""
    import subprocess

    marker = tmp_path / "pwned"
    wf = _text_into_apply(tmp_path, "text_cli")
    cmd = [
        sys.executable,
        "-m",
        "dagster_graphbook.cli",
        "run",
        str(wf),
        "--custom-nodes",
        str(nodes),
        "--dagster-home",
        dagster_home,
        "--no-progress",
        "--set",
        f"Code.val={json.dumps(_evil(marker))}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert not marker.exists()
    assert "resource 'Code' (node 3)" in out and "parameter 'val'" in out, out
    assert "see the Dagster event log" not in out, out


@pytest.mark.parametrize(
    "tag", ["!!python/object/apply:os.system", "!!python/name:os.system", "!!binary"]
)
def test_cli_refuses_yaml_object_tags_in_set_clearly(tmp_path, nodes, dagster_home, tag):
    """``--set`` values of non-string fields are read with YAML's safe loader: a ``!!python/...``
    tag builds nothing, and the CLI says which value it refused instead of ending in a YAML
    traceback. A string parameter takes the same text as it is: text, never YAML."""
    import subprocess

    marker = tmp_path / "pwned"
    wf = _text_into_apply(tmp_path, "tags_cli")
    value = f'{tag} ["touch {marker}"]'
    cmd = [sys.executable, "-m", "dagster_graphbook.cli", "run", str(wf), "--custom-nodes",
           str(nodes), "--dagster-home", dagster_home, "--no-progress", "--set",
           f"Apply.runtime.retries={value}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert not marker.exists()
    assert "Traceback" not in out, out
    assert out.startswith(
        f"dagster-graphbook run {wf}: --set Apply.runtime.retries: the value "
        f"{value[:40]!r}... ({len(value)} characters) is not a plain YAML value"
    ), out
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        assert instance.get_runs() == []  # refused before any run
    cmd[-1] = f"Apply.label={value}"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and not marker.exists(), proc.stdout + proc.stderr


def _alias_bomb(levels: int = 8) -> str:
    """``[&a [x,x,...], &b [*a,*a,...], ...]``: 9 items a level, 9**8 (43 million) ``x``."""
    names = [chr(ord("a") + i) for i in range(levels)]
    rows = ["&a [" + ",".join(["x"] * 9) + "]"]
    rows += [f"&{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip(names, names[1:])]
    return "[" + ", ".join(rows) + "]"


# Runs the command after -c's arguments and reports its peak memory (KiB) on the last line.
_PEAK_RSS = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(code)"
)


def test_cli_refuses_a_yaml_alias_bomb_before_expanding_it(tmp_path, nodes, dagster_home):
    """An 8-level alias bomb in ``--set`` was refused only after expansion, and the error
    printed the expanded value: 254 MB of output and 1.1 GB of memory. Anchors and aliases are
    refused as the YAML is read, and an error quotes only the value's start."""
    import subprocess
    import time

    wf = _text_into_apply(tmp_path, "bomb_cli")
    bomb = _alias_bomb()
    cmd = [sys.executable, "-c", _PEAK_RSS, sys.executable, "-m", "dagster_graphbook.cli", "run",
           str(wf), "--custom-nodes", str(nodes), "--dagster-home", dagster_home,
           "--no-progress", "--set", f"Apply.runtime.retries={bomb}"]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    *said, peak_kib = proc.stderr.strip().splitlines()
    out = proc.stdout + "\n".join(said)
    assert proc.returncode == 1, out[:2000]
    assert len(out) < 1000, f"{len(out)} characters of output: {out[:2000]}"
    assert "Apply.runtime.retries" in out and "anchors or aliases" in out, out
    assert bomb[:40] in out and bomb not in out, out
    assert int(peak_kib) < 400 * 1024, f"peak memory {int(peak_kib) // 1024} MiB"
    assert seconds < 60, f"{seconds:.1f} s"
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        assert instance.get_runs() == []


# ---------------------------------------------------------------------------------------------
# Partition keys

PARTITION_NODES = """
    from graphbook import step, source, param


    @step("Trust/Day")
    @source()
    @param("path", "string", default="in/{partition_key}")
    @param("fn", "function", default="def fn():\\n    return '{partition_key}'")
    def day(ctx):
        yield {"out": {"path": ctx.path, "fn": ctx.fn()}}
    """


def _day_defs(tmp_path: Path, partitions_def):
    nodes = write_nodes(tmp_path / "day_nodes", "day_nodes.py", PARTITION_NODES)
    wf = write_workflow(tmp_path, "days", [step_node("1", "Day", source=True)], [])
    return build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes], partitions_def=partitions_def)],
        notes_dir=str(tmp_path / "notes"),
    )


def test_partition_key_never_reaches_function_source(tmp_path, dagster_home):
    """13.3: ``{partition_key}`` fills string parameters, never the source of a function."""
    defs = _day_defs(tmp_path, dg.StaticPartitionsDefinition(["a", "b"]))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, partition_key="b"
        )
    assert result.success
    assert result.output_for_node("days__Day", "out") == [{"path": "in/b", "fn": "{partition_key}"}]


def test_crafted_partition_key_on_an_unpartitioned_job_is_refused(tmp_path, dagster_home):
    """13.3: a partition tag on an unpartitioned job (the Launchpad lets anyone add tags) used to
    be substituted into every string parameter, code included."""
    marker = tmp_path / "pwned"
    defs = _day_defs(tmp_path, None)
    key = f"' + str(open({str(marker)!r}, 'w').write('x')) + '"
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, tags={"dagster/partition": key}, raise_on_error=False
        )
        failure = _failure(instance, result.run_id)
    assert not result.success and not marker.exists()
    assert "workflow 'days', step 'Day' (node 1)" in failure and "refused" in failure, failure
    # on a partitioned job, a key outside its partitions is refused as well
    defs = _day_defs(tmp_path, dg.StaticPartitionsDefinition(["a", "b"]))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, tags={"dagster/partition": "zzz"}, raise_on_error=False
        )
        assert not result.success and "zzz" in _failure(instance, result.run_id)


@pytest.mark.parametrize("key", ["../../evil", "{0.__class__}", "a/b", ".hidden"])
def test_crafted_dynamic_partition_keys_are_refused(tmp_path, dagster_home, key):
    """13.3: a dynamic partition added through the UI (or the API) with path or format syntax is
    refused before the step reads or writes anything with it."""
    defs = _day_defs(tmp_path, dg.DynamicPartitionsDefinition(name="days"))
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        instance.add_dynamic_partitions("days", [key])
        result = defs.resolve_job_def("days").execute_in_process(
            instance=instance, partition_key=key, raise_on_error=False
        )
        failure = _failure(instance, result.run_id)
    assert not result.success
    assert f"partition key {key!r} refused" in failure, failure
    outside = [p for p in tmp_path.rglob("*.pkl") if (tmp_path / "notes") not in p.parents]
    assert not outside and not list((tmp_path / "notes").rglob("*.pkl")), outside


def test_dynamic_partition_keys_the_store_cannot_hold_are_refused(tmp_path, dagster_home):
    """A 300-character dynamic partition key passed the key check; the step did all its work,
    then failed storing it (``OSError: File name too long``). The key names a folder of the
    notes store, so past 255 bytes of UTF-8 (NAME_MAX) it is refused before the step works,
    saying the limit; a key of exactly 255 bytes runs and stores."""
    marker = tmp_path / "worked"
    nodes = write_nodes(
        tmp_path / "long_nodes",
        "long_nodes.py",
        f"""
        from graphbook import step, source


        @step("Trust/Work")
        @source()
        def work(ctx):
            open({str(marker)!r}, "a").write("x")
            yield {{"out": {{"i": 1}}}}
        """,
    )
    wf = write_workflow(tmp_path, "long_keys", [step_node("1", "Work", source=True)], [])
    days = dg.DynamicPartitionsDefinition(name="long_keys")
    defs = build_definitions(
        [GraphbookWorkflow(wf, custom_nodes=[nodes], partitions_def=days)],
        notes_dir=str(tmp_path / "notes"),
    )
    job = defs.resolve_job_def("long_keys")
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for key, size in (("k" * 300, 300), ("é" * 128, 256)):
            instance.add_dynamic_partitions("long_keys", [key])
            result = job.execute_in_process(
                instance=instance, partition_key=key, raise_on_error=False
            )
            failure = _failure(instance, result.run_id)
            assert not result.success
            assert f"({size} bytes) refused" in failure and "at most 255 bytes" in failure, failure
            assert key not in failure and len(failure) < 1000, failure  # its start, not all of it
            assert not marker.exists() and not list((tmp_path / "notes").rglob("*.pkl"))
        longest = "k" * 255
        instance.add_dynamic_partitions("long_keys", [longest])
        result = job.execute_in_process(instance=instance, partition_key=longest)
    assert result.success and marker.read_text() == "x"
    [stored] = (tmp_path / "notes").rglob("*.pkl")
    assert stored.parent.name == longest


def _failure(instance: dg.DagsterInstance, run_id: str) -> str:
    from dagster_graphbook.cli.run import _failure_message

    return _failure_message(instance, run_id)
