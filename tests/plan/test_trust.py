"""The trust rule, tried as an attacker with Launchpad access: run config never becomes code (which
parameters hold code is decided at definition time; partition keys:
tests/execution/ownership/test_guard.py).
Each test launches a real run on a real instance with the attack and checks that the attacker's
code did not run (its marker file is absent) and that the refusal names the culprit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_workflow

MINUS_ONE = "def fn(x):\n    return x - 1"


def _evil(marker: Path) -> str:
    """Function source that leaves ``marker`` behind when it is compiled (module-level code)."""
    return f"def fn(x):\n    return True\nopen({str(marker)!r}, 'w').write('pwned')\n"


@pytest.fixture
def nodes(tmp_path: Path) -> Path:
    return copy_nodes(tmp_path / "trust_nodes", "trust_nodes.py", "trusted_code")


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
