"""`GraphbookTranslator`: how workflow nodes map onto Dagster names, asset specs and tags.

Like dagster-dbt's ``DagsterDbtTranslator``: one class, each mapping a method, overridable by
subclassing. Methods receive the `Workflow` and the `WorkflowNode` (whose ``raw`` is the node
dict as Graphbook's editor saved it).

The translator is the one source of names: `GraphbookTranslator.names` asks every hook once per
workflow and the rest of the package (assets, streaming op, runner, CLI) reads keys, deps, op
names and resource keys from that `WorkflowNames`, never composing them itself. So an override
of any hook, ``get_asset_spec`` included, changes every place that uses the name.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import dagster as dg

from ..model.workflow import Workflow, WorkflowError, WorkflowNode
from .code_version import node_code_references, node_code_version
from .docstrings import pin_docs, to_markdown
from .job_steps import GRAPHBOOK_META, STEPS_TAG
from .node_info import node_info
from .refs import resolve_refs, shared_refs, step_refs_of
from .step_kinds import step_kinds

_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")


def safe_name(text: str) -> str:
    """Dagster names allow ``[A-Za-z0-9_]`` only."""
    return _UNSAFE.sub("_", text).strip("_") or "node"


@dataclass(frozen=True)
class StepNames:
    """The Dagster names of one step node, as its workflow's translator gave them."""

    node_id: str
    step: str  # unique in the workflow; the step's name in notes and messages
    op_name: str
    refs: Tuple[str, ...]  # what a user may call the step by: step name, node id, class, label
    specs: Mapping[str, dg.AssetSpec]  # pin -> asset spec
    output_names: Mapping[str, str]  # pin -> output name of the step's own op
    stream_output_names: Mapping[str, str]  # pin -> output name inside the streaming op

    def key(self, pin: str) -> dg.AssetKey:
        return self.specs[pin].key


@dataclass(frozen=True)
class WorkflowNames:
    """Every Dagster name of one workflow, each asked of the translator once."""

    workflow: str
    job_name: str
    stream_op_name: str
    steps: Mapping[str, StepNames]  # step node id -> its names, in topological order
    resource_keys: Mapping[str, str]  # resource node id -> resource key
    resource_refs: Mapping[str, str]  # resource label, class name or node id -> resource key
    # a name several steps or resources answer to (so none of them) -> a name of each alone
    shared: Mapping[str, List[str]] = field(default_factory=dict)

    def step_refs(self) -> Dict[str, StepNames]:
        """Every name a user may call a step by -> the step (a step name wins over a label)."""
        return resolve_refs((s.refs, s) for s in self.steps.values())

    def resolve_step(self, ref: Any) -> Optional[StepNames]:
        """The step a user means by ``ref`` (its step name, label, class name or node id; a step
        name wins over the others): the one answer to "which step is X?"."""
        return self.step_refs().get(ref) if isinstance(ref, str) else None

    def step_list(self) -> str:
        """The steps' names, for errors that list what exists."""
        return ", ".join(s.step for s in self.steps.values())

    def steps_tag(
        self,
        node_ids: Iterable[str],
        code: Optional[Mapping[str, Iterable[str]]] = None,
        resources: Optional[Mapping[str, Iterable[str]]] = None,
    ) -> Dict[str, str]:
        """The `STEPS_TAG` op tag of an op running the steps ``node_ids``; ``code``: node id ->
        its parameters that hold code (no ``{partition_key}`` is filled into them);
        ``resources``: node id -> the resource keys it uses, tagged with every name a user may
        call their resource by (``--set ShapesModel.checkpoint=`` on a code location's job)."""
        value = []
        for s in (self.steps[n] for n in node_ids):
            used = set((resources or {}).get(s.node_id, ()))
            refs = {ref: key for ref, key in self.resource_refs.items() if key in used}
            value.append(
                {
                    "op": s.op_name,
                    "refs": list(s.refs),
                    "assets": [[list(spec.key.path), pin] for pin, spec in s.specs.items()],
                    **({"code": sorted(code[s.node_id])} if code and code.get(s.node_id) else {}),
                    **({"resources": refs} if refs else {}),
                }
            )
        return {STEPS_TAG: json.dumps(value, separators=(",", ":"))}


class GraphbookTranslator:
    """Maps a Graphbook workflow onto Dagster definitions.

    Subclass it and override a ``get_*`` method to change one attribute everywhere; pass the
    instance as ``build_definitions(..., translator=...)`` (and ``run_workflow(translator=...)``).
    """

    # ------------------------------------------------------------------ names, asked once

    def names(self, workflow: Workflow) -> WorkflowNames:
        """Every key, op name and resource key of ``workflow``, from the hooks, computed once.

        Raises `WorkflowError` when two steps or pins get the same op name or asset key.
        """
        cache = self.__dict__.setdefault("_names_cache", {})
        hit = cache.get(id(workflow))
        if hit is not None and hit[0] is workflow:
            return hit[1]
        names = self._build_names(workflow)
        cache[id(workflow)] = (workflow, names)
        return names

    def _build_names(self, workflow: Workflow) -> WorkflowNames:
        step_names = self.step_names(workflow)
        steps: Dict[str, StepNames] = {}
        owner: Dict[Any, str] = {}  # asset key or op name -> who has it, for the error
        problems: List[str] = []
        for node in workflow.steps():
            step = step_names[node.id]
            specs = {}
            for pin in node.outputs:
                spec = self.get_asset_spec(workflow, node, pin)
                if not isinstance(spec, dg.AssetSpec):
                    raise WorkflowError(
                        workflow.source,
                        [
                            f"{type(self).__name__}.get_asset_spec returned "
                            f"{type(spec).__name__} for step {step!r}, pin {pin!r}; "
                            "expected a dagster.AssetSpec"
                        ],
                    )
                where = f"step {step!r} (node {node.id}), pin {pin!r}"
                if spec.key in owner:
                    problems.append(
                        f"{where} and {owner[spec.key]} have the same asset key "
                        f"{spec.key.to_user_string()!r}: make the translator's keys unique"
                    )
                owner.setdefault(spec.key, where)
                specs[pin] = spec
            op_name = self.get_op_name(workflow, node)
            if ("op", op_name) in owner:
                problems.append(
                    f"step {step!r} (node {node.id}) and {owner[('op', op_name)]} have the "
                    f"same op name {op_name!r}: make the translator's op names unique"
                )
            owner.setdefault(("op", op_name), f"step {step!r} (node {node.id})")
            steps[node.id] = StepNames(
                node_id=node.id,
                step=step,
                op_name=op_name,
                refs=step_refs_of(node, step),
                specs=specs,
                output_names={pin: safe_name(pin) for pin in node.outputs},
                stream_output_names={pin: f"{step}__{safe_name(pin)}" for pin in node.outputs},
            )
        resource_keys = {n.id: self.get_resource_key(workflow, n) for n in workflow.resources()}
        for nid, key in resource_keys.items():
            other = next((o for o, k in resource_keys.items() if k == key and o < nid), None)
            if other is not None:
                problems.append(
                    f"resource nodes {other} and {nid} have the same resource key {key!r}: "
                    "make the translator's resource keys unique"
                )
        if problems:
            raise WorkflowError(workflow.source, problems)
        resource_items = [
            ((n.label or n.name, n.id, n.name), resource_keys[n.id]) for n in workflow.resources()
        ]
        resource_refs = resolve_refs(resource_items)
        shared = {
            **shared_refs(resource_items),
            **shared_refs((s.refs, s) for s in steps.values()),
        }
        return WorkflowNames(
            workflow=workflow.name,
            job_name=self.get_job_name(workflow),
            stream_op_name=self.get_stream_op_name(workflow),
            steps=steps,
            resource_keys=resource_keys,
            resource_refs=resource_refs,
            shared=shared,
        )

    def step_names(self, workflow: Workflow) -> Dict[str, str]:
        """Step names for every node, made unique with the node id where two collide.

        Computed once per workflow (every key and op name asks for it: per node it made building a
        big workflow quadratic).
        """
        cache = self.__dict__.setdefault("_step_names_cache", {})
        hit = cache.get(id(workflow))
        if hit is not None and hit[0] is workflow:
            return hit[1]
        names = {n.id: self.get_step_name(workflow, n) for n in workflow.nodes.values()}
        counts = Counter(names.values())
        unique = {
            nid: f"{name}_{safe_name(nid)}" if counts[name] > 1 else name
            for nid, name in names.items()
        }
        cache[id(workflow)] = (workflow, unique)
        return unique

    # ------------------------------------------------------------------ hooks

    def get_asset_spec(self, workflow: Workflow, node: WorkflowNode, pin: str) -> dg.AssetSpec:
        """The asset of one output pin: the main hook, memoized per (workflow, node, pin).

        Its key is the asset key everywhere (the step's op, the inputs of the steps it feeds, the
        runner's notes); its ``deps`` start with the specs of the pins the node reads. Extra deps
        become non-data dependencies; the pins the node reads stay its inputs.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_asset_spec(self, workflow, node, pin):
                        spec = super().get_asset_spec(workflow, node, pin)
                        return spec.replace_attributes(
                            key=spec.key.with_prefix("lake"), owners=["team:ml"]
                        )
        """
        memo = self.__dict__.setdefault("_spec_cache", {})
        memo_id = (id(workflow), node.id, pin)
        hit = memo.get(memo_id)
        if hit is not None and hit[0] is workflow:
            return hit[1]
        parents: Dict[dg.AssetKey, None] = {}
        for src, src_pin in node.inputs:
            parents[self.get_asset_spec(workflow, workflow.nodes[src], src_pin).key] = None
        spec = dg.AssetSpec(
            key=self.get_asset_key(workflow, node, pin),
            deps=list(parents),
            description=self.get_pin_description(workflow, node, pin),
            group_name=self.get_group_name(workflow),
            kinds=self.get_kinds(workflow, node),
            metadata={
                **self.get_metadata(workflow, node, pin),
                "dagster/code_references": self.get_code_references(workflow, node),
            },
            tags=self.get_tags(workflow, node),
            code_version=self.get_code_version(workflow, node),
        )
        memo[memo_id] = (workflow, spec)
        return spec

    def get_step_name(self, workflow: Workflow, node: WorkflowNode) -> str:
        """The step's part of asset keys and op names: its label, else its class name.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_step_name(self, workflow, node):
                        return super().get_step_name(workflow, node).lower()
        """
        return safe_name(node.label or node.name)

    def get_asset_key(self, workflow: Workflow, node: WorkflowNode, pin: str) -> dg.AssetKey:
        """``[workflow, step, pin]``, or ``[workflow, step]`` for a step whose only pin is ``out``.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_asset_key(self, workflow, node, pin):
                        return super().get_asset_key(workflow, node, pin).with_prefix("lake")
        """
        step = self.step_names(workflow)[node.id]
        if node.outputs == ["out"]:
            return dg.AssetKey([workflow.name, step])
        return dg.AssetKey([workflow.name, step, safe_name(pin)])

    def get_op_name(self, workflow: Workflow, node: WorkflowNode) -> str:
        """The step's op name (``workflow__step``), also its config key in the Launchpad.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_op_name(self, workflow, node):
                        return f"gb_{super().get_op_name(workflow, node)}"
        """
        return f"{workflow.name}__{self.step_names(workflow)[node.id]}"

    def get_shard_op_names(
        self, workflow: Workflow, node: WorkflowNode, op_name: str
    ) -> Tuple[str, str, str]:
        """The inner ops of a sharded step (``GraphbookWorkflow(shards=...)``): the one that
        splits its notes, the one run per shard and the one that commits the merged result
        (``<op>__plan``, ``<op>__shard``, ``<op>__commit``; unique per job, as Dagster needs).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_shard_op_names(self, workflow, node, op_name):
                        return (f"{op_name}_split", f"{op_name}_part", f"{op_name}_merge")
        """
        return (f"{op_name}__plan", f"{op_name}__shard", f"{op_name}__commit")

    def get_stream_op_name(self, workflow: Workflow) -> str:
        """The one op of a streaming workflow (``GraphbookWorkflow(streaming=True)``).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_stream_op_name(self, workflow):
                        return f"{workflow.name}_streamed"
        """
        return f"{self.get_job_name(workflow)}__stream"

    def get_job_name(self, workflow: Workflow) -> str:
        """The workflow's job (schedules and sensors are named after it).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_job_name(self, workflow):
                        return f"{workflow.name}_job"
        """
        return workflow.name

    def get_group_name(self, workflow: Workflow) -> str:
        """The asset group of the workflow's assets and of its external inputs.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_group_name(self, workflow):
                        return "ml_pipelines"
        """
        return workflow.name

    def get_resource_key(self, workflow: Workflow, node: WorkflowNode) -> str:
        """The Dagster resource key of a resource node (what the steps using it require).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_resource_key(self, workflow, node):
                        return f"shared_{safe_name(node.label or node.name).lower()}"
        """
        return f"{workflow.name}__{self.step_names(workflow)[node.id]}"

    def get_description(self, workflow: Workflow, node: WorkflowNode) -> str:
        """The step's (or resource's) description: its class docstring as Markdown (RST markup and
        Google sections converted).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_description(self, workflow, node):
                        return f"{super().get_description(workflow, node)}\n\nOwned by ML."
        """
        doc = to_markdown(node.cls.__doc__)
        return doc or f"Graphbook {node.step_kind} `{node.name}` (node {node.id})"

    def get_job_description(self, workflow: Workflow) -> str:
        """The job's description: the workflow's doc, else its source.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_job_description(self, workflow):
                        return f"Nightly run of {workflow.name}"
        """
        return workflow.doc or f"Graphbook workflow `{workflow.name}` ({workflow.source})"

    def get_kinds(self, workflow: Workflow, node: WorkflowNode) -> set:
        """Kinds shown as badges: ``python``; ``parquet`` when the step has a sink pin (stored as a
        table); ``pytorch`` when it or a resource it is bound to runs a torch model
        (``step_kinds.py``).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_kinds(self, workflow, node):
                        return {*super().get_kinds(workflow, node), "s3"}
        """
        return step_kinds(workflow, node)

    def get_metadata(self, workflow: Workflow, node: WorkflowNode, pin: str) -> Mapping[str, Any]:
        """Definition metadata: the node's constants in one ``graphbook`` entry (materializations
        carry only what changes per run, so the UI's Plots tab shows no constants).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_metadata(self, workflow, node, pin):
                        return {**super().get_metadata(workflow, node, pin), "team": "ml"}
        """
        return {GRAPHBOOK_META: dg.MetadataValue.json(node_info(workflow, node, pin))}

    def get_tags(self, workflow: Workflow, node: WorkflowNode) -> Mapping[str, str]:
        """Asset tags of the step's assets.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_tags(self, workflow, node):
                        return {**super().get_tags(workflow, node), "tier": "gold"}
        """
        return {"graphbook/step_kind": node.step_kind}

    def get_op_tags(self, workflow: Workflow, node: WorkflowNode) -> Mapping[str, Any]:
        """Op tags (executors read them: ``dagster-k8s/config``, ``dagster-ray/config``, ...).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_op_tags(self, workflow, node):
                        k8s = {"container_config": {"resources": {"limits": {"cpu": "2"}}}}
                        return {**super().get_op_tags(workflow, node), "dagster-k8s/config": k8s}
        """
        from .gpus import step_op_tags

        gpus = step_op_tags(workflow, node)  # GraphbookWorkflow(gpus=...), graphbook.ray.options
        return {"graphbook/node_id": node.id, "graphbook/class": node.name, **gpus}

    def get_pool(self, workflow: Workflow, node: WorkflowNode) -> Optional[str]:
        """Concurrency pool: batch steps and steps that request GPUs (``gpus=``,
        ``graphbook.ray.options(num_gpus=...)``) share ``gpu`` so one GPU is not oversubscribed
        across runs.

        A pool without a limit set on the instance does not restrict anything; set one with
        ``dagster instance concurrency set gpu 1``. A streaming op takes its first step's pool.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_pool(self, workflow, node):
                        return "a100" if node.step_kind == "batch" else None
        """
        from .gpus import step_request

        return "gpu" if node.step_kind == "batch" or step_request(workflow, node)[0] > 0 else None

    def get_code_version(self, workflow: Workflow, node: WorkflowNode) -> Optional[str]:
        """Changes when the step's class, its file or the node's parameter values change, so the
        UI shows "Unsynced" on assets materialized by older code (``None``: no versioning).

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_code_version(self, workflow, node):
                        return os.environ.get("GIT_SHA")
        """
        return node_code_version(node)

    def get_code_references(self, workflow: Workflow, node: WorkflowNode) -> Any:
        """``dagster/code_references``: the step class's file and line, the workflow file's node.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_code_references(self, workflow, node):
                        url = f"https://github.com/org/repo/blob/main/nodes/{node.name}.py"
                        return dg.CodeReferencesMetadataValue(
                            code_references=[dg.UrlCodeReference(url=url, label=node.name)]
                        )
        """
        return node_code_references(workflow, node)

    def get_schedule_name(self, workflow: Workflow, kind: str) -> str:
        """The workflow's schedule: ``kind`` is ``nightly`` (daily partitions) or ``schedule`` (a
        cron); default ``<job>_<kind>``.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_schedule_name(self, workflow, kind):
                        return f"{workflow.name}_every_night"
        """
        return f"{self.names(workflow).job_name}_{kind}"

    def get_sensor_name(self, workflow: Workflow, kind: str) -> str:
        """The workflow's sensors: ``kind`` is ``new_folder`` (the folder sensor; ``new_files``
        when it watches files; its own ``name`` wins) or ``automation`` (the automation condition
        sensor); default ``<job>_<kind>``.

        Examples:
            .. code-block:: python

                class MyTranslator(GraphbookTranslator):
                    def get_sensor_name(self, workflow, kind):
                        return f"{workflow.name}_{kind}_sensor"
        """
        return f"{self.names(workflow).job_name}_{kind}"

    def get_retry_policy(self, workflow: Workflow, node: WorkflowNode) -> Optional[dg.RetryPolicy]:
        """The step op's retry policy where the workflow sets none (``GraphbookWorkflow`` or YAML
        ``retry_policy``, which apply to every step); ``None``: no retries.

        Examples:
            .. code-block:: python

                class RetryLoads(GraphbookTranslator):
                    def get_retry_policy(self, workflow, node):
                        if node.step_kind == "source":
                            return dg.RetryPolicy(max_retries=3, delay=10)
                        return None
        """
        return None

    def get_pin_description(self, workflow: Workflow, node: WorkflowNode, pin: str) -> str:
        """The description of the asset of ``pin``: the first paragraph of ``get_description`` and
        what goes to that pin
        (its entry in the docstring's ``Outputs:`` section). A step whose only pin is ``out``
        gets the step's description.

        Examples:
            ``return f"{node.name}: notes on pin {pin}"`` in a subclass names only the pin.
        """
        if node.outputs == ["out"]:
            return self.get_description(workflow, node)
        # the first paragraph of get_description, so overriding that reaches every pin's asset
        head = " ".join(self.get_description(workflow, node).split("\n\n", 1)[0].split())
        said = pin_docs(node.cls.__doc__).get(pin)
        return f"{head}\n\nNotes sent to pin `{pin}`" + (f": {said}" if said else ".")


def path_of_translator(translator: GraphbookTranslator) -> Optional[str]:
    """``module:Class`` a step process rebuilds ``translator`` from (``None``: the default)."""
    cls = type(translator)
    if cls is GraphbookTranslator:
        return None
    if "<locals>" in cls.__qualname__ or cls.__module__ == "__main__":
        raise ValueError(
            f"the multiprocess executor rebuilds the translator in each step process: define "
            f"{cls.__qualname__} at the top level of an importable module"
        )
    return f"{cls.__module__}:{cls.__qualname__}"


def import_translator(path: Optional[str]) -> Optional[GraphbookTranslator]:
    """The translator of class ``module:Class`` (built without arguments); ``None`` for none."""
    if path is None:
        return None
    import importlib

    module, sep, qualname = path.partition(":")
    if not sep or not qualname:
        raise ValueError(f"translator {path!r}: expected MODULE:CLASS, e.g. my_pkg.names:Lake")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"translator {path!r}: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(obj, type) and issubclass(obj, GraphbookTranslator)):
        raise ValueError(f"translator {path!r} is not a GraphbookTranslator subclass")
    return obj()
