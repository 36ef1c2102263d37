"""`GraphbookWorkflowComponent`: a Graphbook workflow file declared in YAML (a Dagster component).

```yaml
# definitions/nightly_shapes/defs.yaml
type: dagster_graphbook.GraphbookWorkflowComponent
attributes:
  workflow: ../../workflows/nightly_shapes.json      # paths are relative to this file's folder
  custom_nodes: [../../custom_nodes/nightly]
  partitions: {start_date: "2025-01-01"}             # daily partitions
  schedule_hour: 2                                   # nightly at 02:00 UTC: the previous day
  sensor_folder: ../../data/incoming                 # a run per new dated folder
  sensor_asset: nightly_shapes/incoming              # ...recorded as a materialization of this
  external asset external_deps: {IncomingImages: [nightly_shapes/incoming]}
  op_tags: {team: vision}
  gpus: 1                                            # batch steps request a GPU (op tags)
  shards: {ClassifyShapes: 4}                        # that batch step as 4 shards (Dagster steps)
  translation: {owners: [team:vision], tags: {step: "{{ node.step }}"}}  # asset attributes
  retry_policy: {max_retries: 2, delay: 10}          # every step op (dg.RetryPolicy)
  pool: vision                                       # every step op's concurrency pool
  runtime: {on_item_error: skip}                     # runs start from these step settings
  executor: dagster_graphbook.integrations.ray:ray_executor  # steps as Ray jobs
  executor_config: {ray: {address: "http://ray-head:8265"}}
  strict: true                                       # fail the load if the workflow does not
```

Like dagster-dbt's ``DbtProjectComponent``: the component points at an external file and builds
the same definitions as ``build_definitions([GraphbookWorkflow(...)])`` in Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Dict, List, Literal, Optional, Union

import dagster as dg

from ...model.workflow import WorkflowError
from ...plan.checks import StepCheck
from ...plan.options import describe
from ..definitions import GraphbookWorkflow, NameClaims, build_definitions
from ..executor import import_executor
from ..schedules import FolderSensor, daily_partitions
from .scaffold import GraphbookWorkflowScaffolder
from .translation import TRANSLATION_RESOLVER, TranslationFn, translator_for


def _doc(description: str, *examples: Any) -> dg.Resolver:
    """A field's description and examples for ``dg`` and editors (the YAML schema)."""
    return dg.Resolver.default(description=description, examples=list(examples) or None)


class DailyPartitions(dg.Model, dg.Resolvable):
    """Daily partitions keyed ``YYYY-MM-DD`` (the last is the previous, complete day)."""

    start_date: str
    end_offset: int = 0
    timezone: Optional[str] = None


class RetryPolicyModel(dg.Model, dg.Resolvable):
    """Dagster's ``RetryPolicy`` for every step op: a failed step runs again from its inputs."""

    max_retries: Annotated[int, _doc("times a failed step runs again", 2)] = 1
    delay: Annotated[
        Optional[float], _doc("seconds before a retry (the first, with a backoff)", 10)
    ] = None
    backoff: Annotated[
        Optional[Literal["linear", "exponential"]],
        _doc("how the delay grows from retry to retry", "exponential"),
    ] = None
    jitter: Annotated[
        Optional[Literal["full", "plus_minus"]],
        _doc("random change to each delay (full: 0 to delay; plus_minus: delay +- delay)", "full"),
    ] = None

    def policy(self) -> dg.RetryPolicy:
        return dg.RetryPolicy(
            max_retries=self.max_retries,
            delay=self.delay,
            backoff=dg.Backoff(self.backoff.upper()) if self.backoff else None,
            jitter=dg.Jitter(self.jitter.upper()) if self.jitter else None,
        )


# The options whose YAML fields differ from GraphbookWorkflow's (names, shapes, relative paths):
# option -> its YAML fields, translated in workflow_spec. Every other option is SAME_OPTIONS.
TRANSLATED_OPTIONS = {
    "partitions_def": ("partitions",),
    "sensor": ("sensor_folder", "sensor_watch", "sensor_asset"),
    "external_deps": ("external_deps",),
    "executor": ("executor", "executor_config"),
    "notes_dir": ("notes_dir",),
    "retry_policy": ("retry_policy",),
}
# The options whose YAML field has GraphbookWorkflow's name, shape and description
# (``plan/options.py``): passed through as they are.
SAME_OPTIONS = (
    "cron_schedule",
    "schedule_hour",
    "op_tags",
    "job_tags",
    "overridable_functions",
    "runtime",
    "notes_keep",
    "checks",
    "empty_source",
    "streaming",
    "gpus",
    "shards",
    "preview",
    "pool",
    "automation",
)


@dg.scaffold_with(GraphbookWorkflowScaffolder)
class GraphbookWorkflowComponent(dg.Component, dg.Model, dg.Resolvable):
    """A Graphbook workflow file (editor JSON, or a ``.py`` defining a ``Graph``) as a Dagster job,
    its steps' assets, and optionally daily partitions, a schedule and a folder sensor."""

    workflow: Annotated[
        str,
        _doc(
            "workflow file (Graphbook editor JSON, or a .py defining a Graph), "
            "relative to this file",
            "../../workflows/nightly_shapes.json",
            "workflow.json",
        ),
    ]
    custom_nodes: Annotated[
        List[str],
        _doc(
            "folders (or .py files) of the workflow's step and resource classes",
            ["../../custom_nodes/nightly"],
            ["nodes.py"],
        ),
    ] = []
    name: Annotated[
        Optional[str],
        _doc(
            "job and asset group name (default: the workflow file's stem in snake_case)",
            "nightly_shapes",
        ),
    ] = None
    partitions: Annotated[
        Optional[DailyPartitions],
        _doc(
            "daily partitions keyed YYYY-MM-DD; steps read the day as {partition_key}",
            {"start_date": "2025-01-01"},
        ),
    ] = None
    cron_schedule: Annotated[
        Optional[str],
        _doc(
            describe("cron_schedule"),
            "30 6 * * 1-5",
        ),
    ] = None
    schedule_hour: Annotated[
        Optional[int],
        _doc(describe("schedule_hour"), 2),
    ] = None
    sensor_folder: Annotated[
        Optional[str],
        _doc(
            "sensor <job>_new_folder: one run per new YYYY-MM-DD folder in this folder",
            "../../data/incoming",
        ),
    ] = None
    sensor_watch: Annotated[
        Literal["days", "files"],
        _doc(
            "days: the sensor runs each new YYYY-MM-DD folder; files: an unpartitioned workflow "
            "over a folder that grows, run when its files change (sensor <job>_new_files; with "
            "runtime incremental, only the new files go through)",
            "files",
        ),
    ] = "days"
    sensor_asset: Annotated[
        Optional[str],
        _doc(
            "asset key (a/b) that the sensor records a materialization of for each new folder",
            "nightly_shapes/incoming",
        ),
    ] = None
    external_deps: Annotated[
        Dict[str, List[str]],
        _doc(
            "step name or node id -> upstream asset keys (a/b) outside the workflow, for lineage",
            {"IncomingImages": ["nightly_shapes/incoming"]},
        ),
    ] = {}
    op_tags: Annotated[
        Dict[str, Any],
        _doc(
            describe("op_tags"),
            {"team": "vision"},
        ),
    ] = {}
    job_tags: Annotated[Dict[str, str], _doc(describe("job_tags"), {"owner": "ml"})] = {}
    overridable_functions: Annotated[
        List[str], _doc(describe("overridable_functions"), ["load_fn"])
    ] = []
    executor: Annotated[
        Optional[str],
        _doc(
            "default: in one process unless a run's execution config picks multiprocess; "
            "multiprocess: one process per step by default; MODULE:ATTR: the ExecutorDefinition "
            "it names (Ray's, dagster-k8s's), with executor_config",
            "multiprocess",
            "dagster_graphbook.integrations.ray:ray_executor",
        ),
    ] = None
    executor_config: Annotated[
        Optional[Dict[str, Any]],
        _doc(
            "the MODULE:ATTR executor's config (its .configured(...)), e.g. the Ray head's address",
            {"ray": {"address": "http://ray-head:8265"}},
        ),
    ] = None
    runtime: Annotated[
        Optional[Dict[str, Any]],
        _doc(
            describe("runtime"),
            {"on_item_error": "skip", "max_skipped_fraction": 0.05},
            {"ClassifyShapes": {"num_workers": 4, "on_item_error": "skip"}},
        ),
    ] = None
    notes_dir: Annotated[
        Optional[str],
        _doc(
            "where steps' notes are stored: relative to this file's folder, or any fsspec URL "
            "(default: the instance's storage); several components may share one",
            "../../notes",
            "s3://bucket/notes",
        ),
    ] = None
    notes_keep: Annotated[Optional[int], _doc(describe("notes_keep"), 3)] = None
    checks: Annotated[
        List[StepCheck],
        _doc(
            describe("checks"),
            [{"step": "ClassifyShapes", "metric": "accuracy", "min": 0.9, "severity": "warn"}],
        ),
    ] = []
    empty_source: Annotated[
        Literal["warn", "blocking", "ignore"],
        _doc(
            describe("empty_source"),
            "blocking",
        ),
    ] = "warn"
    streaming: Annotated[
        Union[bool, List[str]],
        _doc(
            describe("streaming"),
            True,
            ["LoadImages", "ClassifyShapes"],
        ),
    ] = False
    gpus: Annotated[
        Optional[Union[int, Dict[str, int]]],
        _doc(
            describe("gpus"),
            1,
            {"ClassifyShapes": 1},
        ),
    ] = None
    shards: Annotated[
        Optional[Union[int, Dict[str, Union[int, Dict[str, int]]]]],
        _doc(
            describe("shards"),
            {"ClassifyShapes": 4},
            {"ClassifyShapes": {"shard_size": 10000}},
        ),
    ] = None
    preview: Annotated[
        Optional[Union[bool, Dict[str, Any]]],
        _doc(
            describe("preview"),
            False,
            {"max": 6, "size": 128},
            {"ReviewSplit": {"caption": ["label", "confidence"]}, "Train": False},
        ),
    ] = None
    translation: Annotated[Optional[TranslationFn], TRANSLATION_RESOLVER] = None
    retry_policy: Annotated[
        Optional[RetryPolicyModel],
        _doc(
            "retry policy of every step op (Python: GraphbookTranslator.get_retry_policy per step)",
            {"max_retries": 2, "delay": 10, "backoff": "exponential", "jitter": "full"},
        ),
    ] = None
    pool: Annotated[
        Optional[str],
        _doc(
            describe("pool"),
            "vision_gpu",
        ),
    ] = None

    automation: Annotated[
        Literal["eager", "on_cron", "none"],
        _doc(
            describe("automation"),
            "eager",
            "on_cron",
        ),
    ] = "none"

    strict: Annotated[
        Optional[bool],
        _doc(
            "true: a workflow that fails to load fails the code location's load (dg check "
            "defs, dagster definitions validate); false: it shows as a failing job and the "
            "rest loads; default: $DAGSTER_GRAPHBOOK_STRICT (1 in CI), else false",
            True,
        ),
    ] = None

    def workflow_spec(self, base: Path) -> GraphbookWorkflow:
        """The Python declaration this YAML stands for; relative paths resolve against ``base``.

        Field by field: the YAML's names and shapes (``workflow``, ``partitions``,
        ``sensor_folder`` with ``sensor_asset``, ``retry_policy`` as a model) are not
        ``GraphbookWorkflow``'s, so one resolvable aligned with it (dbt's ``DbtProjectArgs``)
        would change the YAML schema and the Python component's fields."""

        def path(p: str) -> Path:
            # Not dbt's context.resolve_source_relative_path: that needs the YAML's source
            # positions, which only a field resolver sees (build_defs' context has none and gives
            # the path back as it is), and a component built in Python has none either.
            return (base / p).resolve()

        partitions = None
        if self.partitions is not None:
            partitions = daily_partitions(
                self.partitions.start_date,
                end_offset=self.partitions.end_offset,
                timezone=self.partitions.timezone,
            )
        return GraphbookWorkflow(
            path(self.workflow),
            custom_nodes=[path(p) for p in self.custom_nodes],
            name=self.name,
            partitions_def=partitions,
            external_deps={
                step: [dg.AssetKey.from_user_string(k) for k in keys]
                for step, keys in self.external_deps.items()
            },
            sensor=FolderSensor(
                self.sensor_folder if "://" in self.sensor_folder else path(self.sensor_folder),
                asset_key=self.sensor_asset,
                watch=self.sensor_watch,
            )
            if self.sensor_folder
            else None,
            executor=self._executor(),
            notes_dir=str(path(self.notes_dir))
            if self.notes_dir and "://" not in self.notes_dir
            else self.notes_dir,
            retry_policy=self.retry_policy.policy() if self.retry_policy else None,
            **{option: getattr(self, option) for option in SAME_OPTIONS},
        )

    def _executor(self) -> Union[None, str, dg.ExecutorDefinition]:
        """``executor:`` as ``GraphbookWorkflow`` takes it; ``executor_config:`` configures a
        ``MODULE:ATTR`` one (a name of Dagster's own takes its config from each run)."""
        if self.executor_config is None:
            return self.executor
        if self.executor is None or ":" not in self.executor:
            raise WorkflowError(
                self.workflow,
                ["executor_config needs executor: MODULE:ATTR (the executor it configures)"],
            )
        try:
            executor = import_executor(self.executor)
        except ValueError as exc:
            raise WorkflowError(self.workflow, [str(exc)]) from exc
        return executor.configured(self.executor_config)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        spec = self.workflow_spec(Path(context.path))
        defs = build_definitions(
            [spec], translator=translator_for(self.translation), strict=self.strict
        )
        claims = _claims_of(context.component_tree)
        claims.claim(str(context.path), spec.source, list(defs.jobs or ()), list(defs.assets or ()))
        return defs


def component_job_name(workflow: Union[str, Path]) -> Optional[str]:
    """The ``name:`` that the ``GraphbookWorkflowComponent`` in the ``defs.yaml`` beside
    ``workflow`` gives it (the job and asset group name; ``dg scaffold`` writes the folder's
    name), else None: no such component, or it names the job after the file's stem as a
    workflow without one is named. Terminal try-outs of a component's file take it, so their
    job and asset keys are the project's (every scaffolded file is ``workflow.json``)."""
    import yaml

    path = Path(workflow).resolve()
    declared = path.parent / "defs.yaml"
    try:
        documents = list(yaml.safe_load_all(declared.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError):  # no component here, or one dg would refuse
        return None
    for doc in documents:
        if not isinstance(doc, dict) or not str(doc.get("type", "")).endswith(
            GraphbookWorkflowComponent.__name__
        ):
            continue
        attributes = doc.get("attributes") or {}
        source = attributes.get("workflow") if isinstance(attributes, dict) else None
        if isinstance(source, str) and (declared.parent / source).resolve() == path:
            name = attributes.get("name")
            return name if isinstance(name, str) and "{{" not in name else None
    return None


# The names claimed by the components of the code location being loaded (one component tree),
# so two components of one name are refused naming both files (NameClaims). Only the latest
# tree is held: loads of one location do not interleave.
_LATEST_TREE: Dict[str, Any] = {}


def _claims_of(tree: Any) -> NameClaims:
    if _LATEST_TREE.get("tree") is not tree:
        _LATEST_TREE.update(tree=tree, claims=NameClaims())
    return _LATEST_TREE["claims"]
