"""Graphbook 0.13.3 programs behave as under real Graphbook (issue #10), beyond conformance runs.

The conformance suite (``tests/conformance``) compares whole runs with real Graphbook's outputs;
these tests cover what a run does not show: the launchpad's config types, the import surface
against the real package, ``python workflow.py`` as a script, real Graphbook winning when
installed, ``validate``'s notices, and ambiguous class names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest

from dagster_graphbook import load_workflow, run_workflow
from dagster_graphbook.model.registry import NodeRegistry
from dagster_graphbook.model.workflow import WorkflowError
from dagster_graphbook.runner.instance import get_instance
from tests.support.nodes import copy_nodes
from tests.support.workflows import edge, resource_node, step_node, write_nodes, write_workflow

CONFORMANCE = Path(__file__).resolve().parent
CASES = CONFORMANCE / "cases"

# Names of graphbook 0.13.3's surface modules that are Graphbook's server, not its authoring API,
# or broken there; docs/graphbook-differences.md lists them as not supported.
NOT_PROVIDED = {
    "graphbook.core": {
        "clients",
        "config",
        "dataloading",
        "doc2md",
        "logs",
        "nodes",
        "shm",
        "viewer",
    },
    "graphbook.core.decorators": {"DecoratorFunction", "create_type", "switch_parent"},
    "graphbook.core.plugins": {"config"},
    "graphbook.core.processing": {"event_handler", "graph_state", "state", "web_processor"},
    "graphbook.core.processing.graph_processor": {
        "ClientPool",
        "Dataloader",
        "ExecutionContext",
        "FileEventHandler",
        "GraphProcessor",
        "GraphState",
        "ImageStorageInterface",
        "MemoryEventHandler",
        "MultiThreadedMemoryManager",
        "SimpleClientPool",
        "StepState",
    },
    "graphbook.core.resources.base": {"ExecutionContext"},
    "graphbook.core.serialization": {
        "NoGraphFound",
        "convert_json_workflows_to_py",
        "deserialize_json_to_graph",
        "get_py_as_graph",
        "get_py_as_workflow",
        "serialize_workflow_as_py",
    },
    "graphbook.core.steps.base": {
        "AnyItemHolders",
        "EventHandler",
        "ExecutionContext",
        "LogWriter",
    },
    "graphbook.core.utils": {"ExecutionContext", "QueueTaskLoop", "TaskLoop", "get_gpu_util"},
}


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_import_surface_matches_real_graphbook() -> None:
    """Every module and name of 0.13.3's authoring surface (recorded from the real package) exists.

    Run in a fresh interpreter: ``import graphbook.core.plugins`` must work through the startup
    hook alone, before anything of dagster_graphbook was imported.
    """
    golden = json.loads((CONFORMANCE / "golden" / "import_surface.json").read_text())
    assert golden["graphbook"] == "0.13.3"
    wanted = {
        m: sorted(set(names) - NOT_PROVIDED.get(m, set())) for m, names in golden["modules"].items()
    }
    code = textwrap.dedent(f"""
        import importlib, json
        wanted = {wanted!r}
        missing = {{}}
        for module, names in wanted.items():
            mod = importlib.import_module(module)
            missing.update({{f"{{module}}.{{n}}": 1 for n in names if not hasattr(mod, n)}})
        print(json.dumps(sorted(missing)))
    """)
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    assert sum(len(v) for v in wanted.values()) > 100


def test_plugin_import_lines_work_in_a_fresh_interpreter() -> None:
    done = _python(
        "from graphbook.core.plugins import export, web\n"
        "import graphbook.core.steps as steps\nfrom graphbook.core.utils import image\n"
        "class S(steps.Step):\n    pass\nexport('S', S); web('dist/bundle.js')\n"
        "import graphbook.core.plugins as p; print(sorted(p.exported_steps['__main__']))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['S']"


def test_dag_logger_import_says_it_is_not_supported() -> None:
    """examples/logging_example.py's first graphbook line fails naming the missing feature."""
    done = _python("from graphbook.logging import DAGLogger")
    assert done.returncode != 0
    assert "graphbook.logging.DAGLogger" in done.stderr and "not supported" in done.stderr
    done = _python("from graphbook.logging import log; print(callable(log))")
    assert done.returncode == 0, done.stderr


def test_real_graphbook_wins_when_installed(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "graphbook"
    (fake / "core").mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    (fake / "core" / "__init__.py").write_text("")
    (fake / "core" / "plugins.py").write_text("REAL_PLUGINS = True\n")
    done = _python(
        "import graphbook, graphbook.core.plugins as p\n"
        "from dagster_graphbook.authoring import compat\n"
        "print(graphbook.REAL, p.REAL_PLUGINS, compat.real_graphbook_installed(),"
        " compat.install_graphbook_alias())",
        PYTHONPATH=str(tmp_path / "site"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True", "False"]


def test_python_workflow_runs_as_a_script(tmp_path: Path) -> None:
    """``python SampleWorkflow.py`` (ending in ``g.run()`` under ``__main__``) runs via Dagster."""
    folder = tmp_path / "wf"
    shutil.copytree(CASES / "python_sample", folder)
    shutil.copy(folder / "custom_nodes" / "sample_steps.py", folder / "sample_steps.py")
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "SampleWorkflow.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DAGSTER_HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "succeeded" in done.stdout and "SplitMean" in done.stdout
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_run_records()
        assert [r.dagster_run.status for r in runs] == [dg.DagsterRunStatus.SUCCESS]
        assert runs[0].dagster_run.job_name.startswith("sample_workflow")


def test_number_parameters_keep_int_and_float_from_run_config(tmp_path: Path) -> None:
    """The launchpad validates ``number`` as a number and hands ints over as ints."""
    case = CASES / "sample_workflow"
    nodes = [case / "custom_nodes"]
    wf = load_workflow(case / "SampleWorkflow.json", NodeRegistry.load(nodes))
    from dagster_graphbook.plan.plan import param_fields

    field = param_fields(wf, wf.nodes["8"])["amount"]
    assert field.config_type.snapshot.scalar_kind == dg._config.ConfigScalarKind.FLOAT  # noqa: SLF001
    assert field.default_value == 6 and isinstance(field.default_value, int)
    run = run_workflow(
        case / "SampleWorkflow.json",
        custom_nodes=nodes,
        dagster_home=str(tmp_path),
        params={"GenerateNumbers.amount": 3, "Transform.scale": 2.5, "Transform.shift": 1},
    )
    assert run.success, run.failure
    notes = run.notes["Transform"]["out"]
    assert len(notes) == 3 and notes[0]["amount_type"] == "int"
    assert notes[0]["param_types"] == ["float", "int"]


def test_validate_lists_ignored_export_nodes_and_idle_steps(tmp_path: Path) -> None:
    case = CASES / "export_node"
    data = json.loads((case / "PageScraper.json").read_text())
    data["nodes"].append(
        {"id": "9", "type": "step", "data": {"name": "ScrapeMission", "label": "Idle"}}
    )
    path = tmp_path / "PageScraper.json"
    path.write_text(json.dumps(data))
    from dagster_graphbook.cli.main import main

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster_graphbook.cli",
            "validate",
            str(path),
            "--custom-nodes",
            str(case / "custom_nodes"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert main is not None
    assert done.returncode == 0, done.stderr
    assert "export node output 0 (from node 4 pin 'out') is ignored" in done.stdout
    assert "node 9 (Idle): ScrapeMission has no input edge" in done.stdout


def test_ambiguous_class_name_fails_only_the_workflow_that_uses_it(tmp_path: Path) -> None:
    nodes = CASES / "duplicate_names" / "custom_nodes"
    registry = NodeRegistry.load([nodes])
    assert load_workflow(CASES / "duplicate_names" / "Dup.json", registry).nodes["2"].name == "Tag"
    data = json.loads((CASES / "duplicate_names" / "Dup.json").read_text())
    data["nodes"][1]["data"]["name"] = "Helper"
    path = tmp_path / "UsesHelper.json"
    path.write_text(json.dumps(data))
    with pytest.raises(WorkflowError) as info:
        load_workflow(path, registry)
    message = str(info.value)
    assert "node 2" in message and "'Helper' is ambiguous" in message
    assert str(nodes / "helper_a.py") in message and str(nodes / "helper_b.py") in message


def test_one_step_name_decorated_per_event_says_how_to_fix(tmp_path: Path) -> None:
    """The docs' core page decorates one function per event with @step("MyStep", event=...);
    0.13.3 builds a class for each and keeps one (a run fails on a missing item_key). Loading
    names the file once and says to attach the events with @event."""
    nodes = tmp_path / "custom_nodes"
    nodes.mkdir()
    (nodes / "my_steps.py").write_text(
        "from graphbook import step\n\n"
        '@step("MyStep")\ndef my_step(ctx, data: dict):\n    ...\n\n'
        '@step("MyStep", event="route")\ndef my_step_forward(ctx, data: dict):\n    ...\n'
    )
    data = json.loads((CASES / "duplicate_names" / "Dup.json").read_text())
    data["nodes"][1]["data"]["name"] = "MyStep"
    path = tmp_path / "UsesMyStep.json"
    path.write_text(json.dumps(data))
    registry = NodeRegistry.load([nodes, CASES / "duplicate_names" / "custom_nodes"])
    with pytest.raises(WorkflowError) as info:
        load_workflow(path, registry)
    message = str(info.value)
    assert f"{nodes / 'my_steps.py'} defines it more than once" in message
    assert "@event(...)" in message


def test_launchpad_validates_number_params_as_numbers() -> None:
    """The webserver validates run config against the job snapshot it got from the code server:
    ``GraphbookNumber`` travels as a FLOAT-kind scalar, so ints and floats pass, text does not."""
    from dagster._config.validate import validate_config_from_snap
    from dagster._core.snap import JobSnap
    from dagster._serdes import deserialize_value, serialize_value

    from dagster_graphbook import GraphbookWorkflow, build_definitions

    case = CASES / "sample_workflow"
    spec = GraphbookWorkflow(case / "SampleWorkflow.json", custom_nodes=[case / "custom_nodes"])
    defs = build_definitions([spec])
    job = next(j for j in defs.resolve_all_job_defs() if not j.name.startswith("__"))
    snap = deserialize_value(serialize_value(JobSnap.from_job_def(job)), JobSnap)
    schema, root = snap.config_schema_snapshot, snap.mode_def_snaps[0].root_config_key
    number = schema.get_config_snap("GraphbookNumber")
    assert number.scalar_kind == dg._config.ConfigScalarKind.FLOAT  # noqa: SLF001

    def valid(value: object) -> bool:
        config = {"ops": {"sample_workflow__GenerateNumbers": {"config": {"amount": value}}}}
        return validate_config_from_snap(schema, root, config).success

    assert valid(4) and valid(2.5)
    assert not valid("abc")


def test_unknown_plugin_node_names_the_package_to_install(tmp_path: Path) -> None:
    """The image_transforms examples use graphbook_huggingface's HuggingfaceDataset; without the
    plugin, loading says which package the editor saved the node from."""
    data = json.loads((CASES / "image_transforms" / "ImageTransforms.json").read_text())
    data["nodes"][0]["data"]["module"] = "graphbook_huggingface.hf_datasets"
    path = tmp_path / "ImageTransforms.json"
    path.write_text(json.dumps(data))
    nodes = tmp_path / "custom_nodes"
    shutil.copytree(CASES / "image_transforms" / "custom_nodes", nodes)
    (nodes / "hf_datasets.py").unlink()  # the stand-in: as if the plugin were missing
    with pytest.raises(WorkflowError) as info:
        load_workflow(path, NodeRegistry.load([nodes]))
    message = str(info.value)
    assert "unknown step 'HuggingfaceDataset'" in message
    assert "module 'graphbook_huggingface.hf_datasets' for it" in message
    assert "'graphbook_huggingface' is not installed" in message
    assert "from graphbook_huggingface import HuggingfaceDataset" in message


# graphbook.core.steps.__all__ of the real 0.13.3 package
GRAPHBOOK_STEPS_ALL = [
    "Step",
    "StepOutput",
    "SourceStep",
    "GeneratorSourceStep",
    "BatchStep",
    "PromptStep",
    "AsyncStep",
    "Split",
    "SplitByItems",
    "SplitItemField",
    "Copy",
    "LoadJSONL",
    "DumpJSONL",
    "log",
]


def test_every_built_in_step_name_imports_in_a_fresh_interpreter() -> None:
    """Every built-in step name imports through the startup hook alone; TransformsLogger
    imports without torch, and making one says why it is not supported."""
    done = _python(
        "import sys\n"
        "from graphbook.core.steps import Split, SplitByItems, SplitItemField, Copy, LoadJSONL,"
        " DumpJSONL, AsyncStep, PromptStep, StepOutput\n"
        "from graphbook.core.steps.base import SplitByItems as B, SplitItemField as F\n"
        "from graphbook.logging.torch import TransformsLogger\n"
        "import graphbook.core.steps as steps\n"
        f"print(sorted(set({GRAPHBOOK_STEPS_ALL!r}) - set(steps.__all__)))\n"
        "print(B is SplitByItems and F is SplitItemField, 'torch' in sys.modules)\n"
        "TransformsLogger(log_dir='logs')\n"
    )
    assert done.stdout.split("\n")[:2] == ["[]", "True False"], done.stderr
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("NotImplementedError: graphbook.logging.torch.TransformsLogger")
    assert (
        "not supported by dagster-graphbook" in last and "Apply the transforms without it" in last
    )


@pytest.mark.parametrize(
    ("name", "why", "instead"),
    [
        ("Ask", "waits for a person to answer", "Decide in code instead"),
        ("Review", "waits for a person to answer", "Decide in code instead"),
        ("Queued", "subclasses AsyncStep", "Subclass BatchStep"),
    ],
)
def test_prompt_and_async_steps_import_and_fail_on_use(
    tmp_path: Path, name: str, why: str, instead: str
) -> None:
    """A workflow using one fails before any run, naming the file, the step, why, what to use."""
    nodes = copy_nodes(tmp_path / "nodes", "unsupported.py", "unsupported_graphbook_features")
    wf = write_workflow(
        tmp_path,
        "Labeling",
        [step_node("1", "Numbers", source=True), step_node("2", name)],
        [edge("1", "out", "2")],
    )
    home = tmp_path / "home"
    home.mkdir()
    instance = get_instance(str(home))
    with pytest.raises(WorkflowError) as info:
        run_workflow(wf, custom_nodes=[nodes], instance=instance)
    headline, problem = str(info.value).splitlines()
    assert headline == f"workflow {wf} is invalid:"
    assert problem.startswith(f"  - node 2 ({name}): {name} ")
    assert why in problem and "not supported" in problem and instead in problem
    assert instance.get_runs() == []


def test_transforms_logger_made_in_a_step_fails_the_run_naming_it(tmp_path: Path) -> None:
    nodes = write_nodes(
        tmp_path / "nodes",
        "transforms.py",
        """
        from graphbook.core.steps import SourceStep, Step
        from graphbook.logging.torch import TransformsLogger


        class Images(SourceStep):
            def load(self):
                return {"out": [{"i": 0}]}


        class Augment(Step):
            def on_start(self):
                self.logger = TransformsLogger()
        """,
    )
    wf = write_workflow(
        tmp_path,
        "Augment",
        [step_node("1", "Images", source=True), step_node("2", "Augment")],
        [edge("1", "out", "2")],
    )
    home = tmp_path / "home"
    home.mkdir()
    run = run_workflow(wf, custom_nodes=[nodes], instance=get_instance(str(home)))
    assert not run.success
    headline = run.failure.splitlines()[0]
    assert "step 'Augment' (node 2): on_start failed: NotImplementedError: " in headline
    assert "TransformsLogger" in headline and "not supported" in headline


@pytest.mark.parametrize(
    ("name", "params", "missing"),
    [
        ("SplitItemField", {"item_key": "boxes", "b_key": "small"}, "a_key"),
        ("SplitItemField", {"item_key": "boxes", "a_key": "big"}, "b_key"),
        ("SplitByItems", {}, "item_key"),
    ],
)
def test_split_steps_left_without_a_key_fail_to_load(
    tmp_path: Path, name: str, params: dict, missing: str
) -> None:
    """Graphbook's editor saves SplitItemField without a_key/b_key (it does not declare them)
    and 0.13.3 fails making the step; here loading names the node and the parameter."""
    fn = "def f(item=None, items=None, data=None):\n    return True"
    wf = write_workflow(
        tmp_path,
        "Split",
        [
            step_node("1", "LoadJSONL", source=True),
            resource_node("2", "Text", {"val": "scenes.jsonl"}),
            step_node("3", name, params),
            resource_node("4", "Function", {"val": fn}),
        ],
        [
            edge("2", "resource", "1", "jsonl_path"),
            edge("1", "out", "3"),
            edge(
                "4", "resource", "3", "split_fn" if name == "SplitItemField" else "split_items_fn"
            ),
        ],
    )
    with pytest.raises(WorkflowError) as info:
        load_workflow(wf, NodeRegistry.load([]))
    assert f"node 3 ({name}): required parameter {missing!r} has no value" in str(info.value)
