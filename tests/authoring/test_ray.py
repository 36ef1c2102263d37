"""``graphbook.ray``: Graphbook 0.13.3's Ray API (``options``, ``RayExecutor``, ``init``,
``remote``), and the import error without the ``ray`` extra. The run on a Ray cluster is
``tests/e2e/test_deploy_distributed.py::test_graphbook_ray_program_runs_unchanged_on_the_cluster``;
the op tags the options become are ``tests/plan/test_gpus.py``'s."""

from __future__ import annotations

import inspect
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from dagster_graphbook.authoring import Graph, resource, step
from dagster_graphbook.authoring.executors import DefaultExecutor, Executor
from dagster_graphbook.authoring.resources import Resource
from dagster_graphbook.authoring.steps import Step

pytest.importorskip("dagster_ray", reason="needs the ray extra: pip install -e '.[ray]'")
gbray = pytest.importorskip("dagster_graphbook.authoring.ray_api")

# graphbook/ray/__init__.py of 0.13.3 (graphbookai/graphbook at v0.13.3)
GRAPHBOOK_RAY_ALL = ["init", "remote", "options", "is_graphbook_ray_initialized", "RayExecutor"]


def test_graphbook_ray_is_this_module_with_graphbook_s_names_and_signatures():
    import graphbook
    import graphbook.ray
    from graphbook import ray as from_import

    assert graphbook.ray is from_import is gbray
    assert gbray.__all__ == GRAPHBOOK_RAY_ALL
    assert _parameters(gbray.init) == [
        ("host", "KEYWORD_ONLY", "0.0.0.0"),
        ("port", "KEYWORD_ONLY", 8005),
    ]
    assert _parameters(gbray.options) == [("kwargs", "VAR_KEYWORD", None)]
    assert _parameters(gbray.RayExecutor) == [
        ("log_dir", "POSITIONAL_OR_KEYWORD", "logs"),
        ("init_args", "VAR_KEYWORD", None),
    ]
    assert issubclass(gbray.RayExecutor, Executor)


def _parameters(fn) -> list:
    return [
        (p.name, p.kind.name, None if p.default is p.empty else p.default)
        for p in inspect.signature(fn).parameters.values()
    ]


def test_options_store_ray_options_on_step_and_resource_classes_as_graphbook_does():
    @gbray.options(num_gpus=1, num_cpus=2)
    class Model(Resource):
        def value(self):
            return "m"

    @step("Infer/Predict")
    @gbray.options(num_gpus=0.5, resources={"tpu": 1})
    def predict(ctx, data):
        data["y"] = 1

    @gbray.options(memory=2**30)  # above @step as well
    @resource("Tokenizer")
    def tokenizer(ctx):
        return "t"

    class Plain(Step):
        pass

    assert Model.Ray_Options == {"num_gpus": 1, "num_cpus": 2}
    assert issubclass(predict, Step) and predict.__name__ == "Predict"
    assert predict.Ray_Options == {"num_gpus": 0.5, "resources": {"tpu": 1}}
    assert tokenizer.Ray_Options == {"memory": 2**30}
    assert not hasattr(Plain, "Ray_Options")
    assert Model().value() == "m"  # the class is the same class, decorated


@pytest.mark.parametrize(
    "kwargs, said",
    [
        ({"num_gpu": 1}, "Invalid option keyword num_gpu"),
        ({"num_gpus": -1}, "cannot be negative"),
        ({"num_cpus": "two"}, "num_cpus"),
        ({"resources": {"GPU": 1}}, "num_gpus"),
    ],
)
def test_options_are_checked_by_ray_when_decorating(kwargs, said):
    with pytest.raises(ValueError, match="graphbook.ray.options") as raised:
        gbray.options(**kwargs)
    assert said in str(raised.value)


def test_remote_says_how_to_run_the_class_on_ray_through_dagster():
    class Detect(Step):
        pass

    with pytest.raises(NotImplementedError, match=r"remote\(Detect\).*add Detect to a Graph"):
        gbray.remote(Detect)


def test_graph_run_takes_the_run_options_of_its_executor(monkeypatch):
    """``g.run(executor=...)`` hands the executor's ``run_options`` to the runner (a
    RayExecutor's: dagster-ray's executor and its config); arguments given to ``run`` win;
    Graphbook's default executor asks for nothing."""
    from dagster_graphbook.authoring import graph as graph_module
    from dagster_graphbook.runner import run as runner

    class OnCluster(Executor):
        def run(self, graph, name, step_id=None):
            return graph.run(executor=self)

        def run_options(self):
            return {"executor": "dagster_ray:ray_executor", "executor_config": {"ray": {}}}

    calls = []

    def fake_run(graph, **kwargs):
        calls.append(kwargs)
        return runner.WorkflowRun("r1", True, 0.5, notes={})

    monkeypatch.setattr(graph_module, "_run_workflow", fake_run)
    g = Graph()
    g.run(executor=OnCluster())
    g.run(executor=OnCluster(), executor_config={"ray": {"address": "x"}})
    g.run(executor=DefaultExecutor(num_workers=2))
    assert calls == [
        {"executor": "dagster_ray:ray_executor", "executor_config": {"ray": {}}, "record": True},
        {
            "executor": "dagster_ray:ray_executor",
            "executor_config": {"ray": {"address": "x"}},
            "record": True,
        },
        {"record": True},
    ]


def test_ray_executor_without_a_job_server_at_the_address_says_so_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    address = f"http://127.0.0.1:{port}"
    with pytest.raises(ConnectionError, match=f"no Ray job server found for address '{address}'"):
        gbray.RayExecutor(address=address)


BLOCK = """
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
"""


@pytest.mark.parametrize("blocked", ["ray", "dagster_ray"])
def test_without_the_ray_extra_graphbook_ray_names_it(blocked):
    """With Ray or dagster-ray absent, ``import graphbook`` and the package still work and
    ``graphbook.ray`` fails naming the extra, as Graphbook's own ``graphbook[ray]`` message does."""
    code = BLOCK.format(blocked=blocked) + textwrap.dedent("""
        import dagster_graphbook, graphbook
        assert graphbook.Graph is dagster_graphbook.authoring.Graph
        print("ray" in sys.modules)  # the package and `import graphbook` import nothing of Ray
        for attempt in ("import graphbook.ray", "from graphbook import ray", "graphbook.ray"):
            try:
                exec(attempt)
            except ImportError as exc:
                print(type(exc).__name__, "|", exc)
            else:
                print("imported", attempt)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 4, done.stdout
    assert lines[0] == "False"
    for line in lines[1:]:
        kind, message = line.split(" | ")
        assert kind == "ImportError", line
        assert "`pip install dagster-graphbook[ray]`" in message
        assert blocked in message


def test_the_executor_run_options_name_is_rebuilt_in_step_processes():
    """``run_workflow(executor="module:attr")`` (what a RayExecutor asks for) builds the job with
    that executor, and the job a step process rebuilds has it too; a wrong name says the forms."""
    from dagster_graphbook.defs.executor import import_executor
    from dagster_graphbook.runner.rebuild import reconstruct_job as _reconstruct_job
    from tests.support.paths import REPO

    assert import_executor(gbray.RAY_EXECUTOR_PATH).name == "ray"
    job = _reconstruct_job(
        str(REPO / "workflows" / "sample.json"),
        (str(REPO / "custom_nodes" / "sample"),),
        None,
        None,
        executor=gbray.RAY_EXECUTOR_PATH,
    )
    assert job.executor_def.name == "ray"
    for bad, said in [
        ("nope", "'in_process', 'multiprocess' or MODULE:ATTR"),
        ("dagster_ray:nope", "AttributeError"),
        ("dagster_ray:__version__", "is a str, not an ExecutorDefinition"),
    ]:
        with pytest.raises(ValueError, match=said):
            import_executor(bad)
