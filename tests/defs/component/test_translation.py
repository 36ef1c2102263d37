"""The YAML component's ``translation``, ``retry_policy`` and ``pool``, the matching
Python hooks, and kinds that say what a step does."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest
from dagster.components import load_defs

from dagster_graphbook import GraphbookTranslator, GraphbookWorkflow, build_definitions
from tests.support.nodes import copy_nodes
from tests.support.paths import REPO
from tests.support.workflows import edge, step_node, write_workflow

pytestmark = pytest.mark.filterwarnings(
    "ignore:Function `load_defs` is deprecated:DeprecationWarning"
)
K = dg.AssetKey


def _load(tmp_path: Path, package: str, yaml_text: str) -> dg.Definitions:
    """``yaml_text`` as ``<package>/wf/defs.yaml`` of a project in ``tmp_path``, loaded as Dagster
    loads a defs folder."""
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "{package}"\nversion = "0"\n')
    (tmp_path / package / "wf").mkdir(parents=True)
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "wf" / "defs.yaml").write_text(textwrap.dedent(yaml_text))
    sys.path.insert(0, str(tmp_path))
    try:
        return load_defs(importlib.import_module(package), project_root=tmp_path)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[name]


def _specs(defs: dg.Definitions) -> dict:
    return {
        key: spec
        for a in defs.assets
        if isinstance(a, dg.AssetsDefinition)
        for key, spec in a.specs_by_key.items()
    }


def _op(defs: dg.Definitions, key: dg.AssetKey):
    return defs.resolve_assets_def(key).op


NIGHTLY = f"""
    type: dagster_graphbook.GraphbookWorkflowComponent
    attributes:
      workflow: {REPO}/workflows/nightly_shapes.json
      custom_nodes: [{REPO}/custom_nodes/nightly]
      partitions: {{start_date: "2026-01-01"}}
      checks:
        - {{step: ClassifyShapes, metric: accuracy, min: 0.9}}
      translation:
        owners: ["team:vision", "ml@example.com"]
        tags:
          category: "{{{{ node.category }}}}"
          step: "{{{{ node.step }}}}"
        kinds: [images]
        group_name: "{{{{ workflow.name }}}}_{{{{ node.step_kind }}}}"
        description: "{{{{ node.label }}}} ({{{{ node.id }}}}), pin {{{{ pin }}}}"
        automation_condition: "{{{{ dg.AutomationCondition.eager() }}}}"
        metadata:
          threshold: "{{{{ node.params.get('threshold') }}}}"
      retry_policy: {{max_retries: 2, delay: 0.5, backoff: exponential, jitter: full}}
      pool: vision
"""


@pytest.fixture(scope="module")
def nightly(tmp_path_factory) -> dg.Definitions:
    return _load(tmp_path_factory.mktemp("nightly"), "gb_translation_nightly", NIGHTLY)


def test_translation_sets_owners_tags_group_description_automation_metadata(nightly):
    specs = _specs(nightly)
    classify = specs[K(["nightly_shapes", "ClassifyShapes"])]
    assert list(classify.owners) == ["team:vision", "ml@example.com"]
    assert classify.tags["category"] == "Nightly" and classify.tags["step"] == "ClassifyShapes"
    assert classify.tags["graphbook/step_kind"] == "batch"  # ours stay: tags are merged
    assert classify.group_name == "nightly_shapes_batch"
    assert classify.description.startswith("ClassifyShapes (")
    assert classify.description.endswith("pin out")
    assert isinstance(classify.automation_condition, dg.AutomationCondition)
    review = specs[K(["nightly_shapes", "ReviewSplit", "review"])]
    assert review.metadata["threshold"] == 0.9  # the node's parameter, from the workflow
    assert review.metadata["graphbook"].value["node_id"]  # ours stay: metadata is merged
    assert review.description.endswith("pin review")
    assert review.group_name == "nightly_shapes_step"
    # the asset checks follow the translated specs (the source's: a partitioned workflow's)
    assert {c.asset_key for c in nightly.resolve_asset_graph().asset_check_keys} == {
        K(["nightly_shapes", "ClassifyShapes"]),
        K(["nightly_shapes", "IncomingImages"]),
    }


def test_translation_kinds_are_merged_with_ours(nightly):
    specs = _specs(nightly)
    assert set(specs[K(["nightly_shapes", "ClassifyShapes"])].kinds) == {
        "python",
        "pytorch",
        "images",
    }
    assert set(specs[K(["nightly_shapes", "SaveResized"])].kinds) == {"python", "parquet", "images"}


def test_yaml_retry_policy_and_pool_reach_every_step_op(nightly):
    for key in _specs(nightly):
        op = _op(nightly, key)
        assert op.retry_policy == dg.RetryPolicy(
            max_retries=2, delay=0.5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.FULL
        ), key
        assert op.pool == "vision", key


def test_nightly_demo_kinds_say_what_each_step_does():
    """The demo's code location (definitions/nightly_shapes/defs.yaml): only ClassifyShapes runs
    a model (its ShapesModel resource loads a torch checkpoint); SaveResized is a batch step
    without one; sink pins are stored as Parquet tables."""
    defs = load_defs(importlib.import_module("definitions.nightly_shapes"), project_root=REPO)
    kinds = {k.to_user_string(): set(s.kinds) for k, s in _specs(defs).items()}
    assert kinds == {
        "nightly_shapes/IncomingImages": {"python"},
        "nightly_shapes/ClassifyShapes": {"python", "pytorch"},
        "nightly_shapes/ReviewSplit/confident": {"python", "parquet"},
        "nightly_shapes/ReviewSplit/review": {"python", "parquet"},
        "nightly_shapes/SaveResized": {"python", "parquet"},
    }


SAMPLE = f"""
    type: dagster_graphbook.GraphbookWorkflowComponent
    attributes:
      workflow: {REPO}/workflows/sample.json
      custom_nodes: [{REPO}/custom_nodes/sample]
      executor: in_process
      notes_dir: NOTES
      translation:
        key_prefix: lab
"""


def test_translation_key_prefix_builds_and_runs(tmp_path):
    """A key changed by the translation keys the asset and every downstream input: the job runs
    and stores notes under the new keys."""
    notes = tmp_path / "notes"
    defs = _load(tmp_path, "gb_translation_keys", SAMPLE.replace("NOTES", str(notes)))
    graph = defs.resolve_asset_graph()
    assert graph.get(K(["lab", "sample", "CalcMean"])).parent_keys == {
        K(["lab", "sample", "Transform"])
    }
    assert K(["sample", "CalcMean"]) not in graph.get_all_asset_keys()
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("sample").execute_in_process(instance=instance)
        assert result.success
        assert instance.get_latest_materialization_event(K(["lab", "sample", "Split", "A"]))
    assert (notes / "lab" / "sample" / "Split" / "A" / f"{result.run_id}.pkl").is_file()


@pytest.mark.parametrize(
    "translation, message",
    [
        ("{description: '{{ node.nope }}'}", "nope"),
        (
            "{partitions_def: {type: static, partition_keys: [a]}}",
            "use the component's `partitions`",
        ),
    ],
)
def test_bad_translation_names_workflow_step_and_pin(tmp_path, translation, message):
    """A translation that fails leaves the other definitions loaded and a job whose description
    names the workflow file, the step and the pin."""
    yaml_text = textwrap.dedent(SAMPLE).replace("NOTES", str(tmp_path / "n"))
    yaml_text = yaml_text.replace(
        "  translation:\n    key_prefix: lab", f"  translation: {translation}"
    )
    defs = _load(tmp_path, "gb_translation_bad", yaml_text)
    job = defs.resolve_job_def("sample")
    assert job.description.startswith("FAILED TO LOAD") and "sample.json" in job.description
    assert "translation of step 'GenerateNumbers'" in job.description
    assert "pin 'out'" in job.description and message in job.description


def _payload(marker: Path) -> str:
    return "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}"


TRANSLATIONS = {
    "template": "\"{{ {'description': node.params.get('text'), "
    "'metadata': {'text': node.params.get('text')}} }}\"",
    "mapping": "{description: \"{{ node.params.get('text') }}\", "
    "metadata: {text: \"{{ node.params.get('text') }}\"}}",
}


@pytest.mark.parametrize("text", ["{{ 6*7 }}", "PAYLOAD", "42", "None"])
@pytest.mark.parametrize("form", sorted(TRANSLATIONS))
def test_workflow_text_stays_text_in_the_translation(tmp_path, form, text):
    """The mapping a template gives was rendered again by Dagster, so a workflow's
    ``{{ 6*7 }}`` became 42 and a payload in a parameter ran at load; and a rendered "42" was
    parsed as a number. Values from the workflow reach the asset as the workflow's text."""
    from jinja2.nativetypes import NativeTemplate

    marker, probe = tmp_path / "MARKER", tmp_path / "PROBE"
    NativeTemplate(_payload(probe)).render()  # the payload is live: rendered, it writes a file
    assert probe.exists()
    text = _payload(marker) if text == "PAYLOAD" else text
    node = step_node("1", "Text", {"text": text}, label="Src", source=True)
    path = write_workflow(tmp_path, "texts", [node], [])
    defs = _load(
        tmp_path,
        "gb_translation_text",
        f"""
        type: dagster_graphbook.GraphbookWorkflowComponent
        attributes:
          workflow: {path}
          custom_nodes: [{copy_nodes(tmp_path / "nodes", "text.py", "translation_text")}]
          translation: {TRANSLATIONS[form]}
        """,
    )
    assert not marker.exists()
    description = defs.resolve_job_def("texts").description
    assert not description.startswith("FAILED TO LOAD"), description
    spec = _specs(defs)[K(["texts", "Src"])]
    assert spec.description == text
    assert spec.metadata["text"] == text
    assert spec.metadata["graphbook"].value["node_id"] == "1"  # ours are merged


def test_yaml_retry_policy_runs_a_step_failing_once_again(tmp_path):
    """A real run: the step fails on its first attempt, the component's ``retry_policy`` has
    Dagster run it again, and it succeeds (attempts counted in a file)."""
    copy_nodes(tmp_path / "nodes", "flaky.py", "translation_flaky")
    attempts = tmp_path / "attempts.txt"
    path = write_workflow(
        tmp_path,
        "flaky",
        [step_node("1", "Numbers", source=True), step_node("2", "Flaky", {"attempts_file": ""})],
        [edge("1", "out", "2")],
    )
    data = json.loads(path.read_text())
    data["nodes"][1]["data"]["parameters"]["attempts_file"]["value"] = str(attempts)
    path.write_text(json.dumps(data))
    defs = _load(
        tmp_path,
        "gb_translation_retry",
        f"""
        type: dagster_graphbook.GraphbookWorkflowComponent
        attributes:
          workflow: {path}
          custom_nodes: [{tmp_path / "nodes"}]
          executor: in_process
          notes_dir: {tmp_path / "notes"}
          retry_policy: {{max_retries: 1}}
        """,
    )
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("flaky").execute_in_process(instance=instance)
        retried = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)
    assert result.success
    assert attempts.read_text().splitlines() == ["attempt", "attempt"]
    assert [e.step_key for e in retried] == ["flaky__Flaky"]


def test_python_hooks_decide_retry_policy_and_pool_where_the_workflow_sets_none():
    policy = dg.RetryPolicy(max_retries=3, delay=1)

    class PerStep(GraphbookTranslator):
        def get_retry_policy(self, workflow, node):
            return policy if node.step_kind == "batch" else None

        def get_pool(self, workflow, node):
            return "models" if node.step_kind == "batch" else "cpu"

    nightly = [REPO / "custom_nodes" / "nightly"]
    source = REPO / "workflows" / "nightly_shapes.json"
    defs = build_definitions([GraphbookWorkflow(source, custom_nodes=nightly)], strict=True)
    classify = _op(defs, K(["nightly_shapes", "ClassifyShapes"]))
    review = _op(defs, K(["nightly_shapes", "ReviewSplit", "review"]))
    assert (classify.retry_policy, classify.pool) == (None, "gpu")  # the defaults
    assert (review.retry_policy, review.pool) == (None, None)

    defs = build_definitions(
        [GraphbookWorkflow(source, custom_nodes=nightly)], translator=PerStep(), strict=True
    )
    classify = _op(defs, K(["nightly_shapes", "ClassifyShapes"]))
    review = _op(defs, K(["nightly_shapes", "ReviewSplit", "review"]))
    assert (classify.retry_policy, classify.pool) == (policy, "models")
    assert (review.retry_policy, review.pool) == (None, "cpu")

    wide = dg.RetryPolicy(max_retries=1)
    spec = GraphbookWorkflow(source, custom_nodes=nightly, retry_policy=wide, pool="night")
    defs = build_definitions([spec], translator=PerStep(), strict=True)
    classify = _op(defs, K(["nightly_shapes", "ClassifyShapes"]))
    assert (classify.retry_policy, classify.pool) == (wide, "night")

    # streamed: one op for every step takes the workflow's settings, else the hooks'
    spec = GraphbookWorkflow(source, custom_nodes=nightly, streaming=True)
    defs = build_definitions([spec], translator=PerStep(), strict=True)
    stream = _op(defs, K(["nightly_shapes", "ClassifyShapes"]))
    assert (stream.retry_policy, stream.pool) == (policy, "cpu")  # IncomingImages' pool comes first
    spec = GraphbookWorkflow(
        source, custom_nodes=nightly, streaming=True, retry_policy=wide, pool="night"
    )
    stream = _op(
        build_definitions([spec], translator=PerStep(), strict=True),
        K(["nightly_shapes", "ClassifyShapes"]),
    )
    assert (stream.retry_policy, stream.pool) == (wide, "night")


def test_new_component_fields_carry_descriptions_and_examples():
    from dagster_graphbook import GraphbookWorkflowComponent

    schema = GraphbookWorkflowComponent.get_model_cls().model_json_schema()
    props = schema["properties"]
    for name in ("translation", "retry_policy", "pool"):
        assert props[name].get("description"), name
        assert props[name].get("examples"), name
    assert props["translation"]["examples"][0]["owners"] == ["team:vision"]
    retry = schema["$defs"][next(d for d in schema["$defs"] if "Retry" in d)]["properties"]
    assert all(p.get("description") and p.get("examples") for p in retry.values()), retry


def test_bad_retry_policy_names_the_file_line_and_allowed_values(tmp_path):
    bad = f"""
        type: dagster_graphbook.GraphbookWorkflowComponent
        attributes:
          workflow: {REPO}/workflows/sample.json
          retry_policy: {{max_retries: 1, backoff: sideways}}
        """
    with pytest.raises(Exception) as info:
        _load(tmp_path, "gb_translation_bad_retry", bad)
    chain, error = [], info.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__
    text = "\n".join(chain)
    assert "defs.yaml:5 - attributes.retry_policy" in text
    assert "Input should be 'linear' or 'exponential'" in text


def test_dg_check_defs_accepts_translation_retry_policy_and_pool(tmp_path):
    """``dg check defs`` (schema check, then load) on a dg project whose component uses them."""
    import os
    import subprocess

    root = tmp_path / "proj"
    (root / "proj_pkg" / "defs" / "nightly").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "proj"\nversion = "0"\n\n[tool.dg]\ndirectory_type = "project"\n\n'
        '[tool.dg.project]\nroot_module = "proj_pkg"\n'
    )
    (root / "proj_pkg" / "__init__.py").write_text("")
    (root / "proj_pkg" / "defs" / "__init__.py").write_text("")
    (root / "proj_pkg" / "definitions.py").write_text(
        "from pathlib import Path\n\nimport dagster as dg\n\n\n@dg.definitions\ndef defs():\n"
        "    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)\n"
    )
    (root / "proj_pkg" / "defs" / "nightly" / "defs.yaml").write_text(textwrap.dedent(NIGHTLY))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "VIRTUAL_ENV": sys.prefix,
        "DAGSTER_HOME": str(home),
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    out = subprocess.run(
        [str(bindir / "dg"), "check", "defs"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All definitions loaded successfully" in out.stdout + out.stderr


def test_python_component_takes_a_translation_callable():
    """The callable form: ``translation(spec, props) -> AssetSpec`` with the node and workflow."""
    from dagster.components.core.component_tree import ComponentTree

    from dagster_graphbook import GraphbookWorkflowComponent

    def translation(spec, props):
        return spec.replace_attributes(
            owners=[f"team:{props.workflow.name}"], kinds={f"step_{props.node.step_kind}"}
        ).merge_attributes(tags={"node_id": props.node.id, "pin": props.pin})

    component = GraphbookWorkflowComponent(
        workflow=str(REPO / "workflows" / "nightly_shapes.json"),
        custom_nodes=[str(REPO / "custom_nodes" / "nightly")],
        translation=translation,
    )
    defs = component.build_defs(ComponentTree.for_test().load_context)
    review = _specs(defs)[K(["nightly_shapes", "ReviewSplit", "review"])]
    assert list(review.owners) == ["team:nightly_shapes"]
    assert set(review.kinds) == {"python", "parquet", "step_step"}  # ours are kept
    assert (review.tags["node_id"], review.tags["pin"]) == ("3", "review")
