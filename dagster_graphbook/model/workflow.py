"""The workflow model: a Graphbook JSON file or a Python ``Graph`` parsed into nodes and edges.

Everything that can be wrong with a workflow is found here, at load time, and reported with
the file and node it concerns.
"""

from __future__ import annotations

import graphlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from ..authoring.graph import Graph, GraphResourceWrapper, GraphStepWrapper
from ..errors import GraphbookError
from . import params as ptypes
from .flatten import flatten, needs_flattening
from .registry import NodeRegistry, import_failure

SUPPORTED_NODE_TYPES = ("step", "resource")
logger = logging.getLogger("dagster_graphbook")


class WorkflowError(GraphbookError, ValueError):
    """A workflow that cannot run; ``problems`` lists each reason with its node.

    A Dagster failure (its message is the headline where an op raises it), still a ValueError.
    """

    def __init__(self, source: str, problems: Sequence[str]):
        self.source = source
        self.problems = list(problems)
        super().__init__(
            f"workflow {source} is invalid:\n" + "\n".join(f"  - {p}" for p in self.problems),
            {"workflow": str(source), "problems": "\n".join(self.problems)},
            allow_retries=False,
        )


class UnboundResourceWarning(UserWarning):
    """A resource parameter that no resource node is connected to, with no default: the step
    receives None (the warning at load; ``DAGSTER_GRAPHBOOK_STRICT`` makes it an error)."""


def _mro_names(cls: type) -> set:
    return {c.__name__ for c in cls.__mro__}


def step_kind(cls: type) -> str:
    """'source', 'batch', 'prompt', 'async' or 'step', by Graphbook's base classes (ours or the
    real ones)."""
    names = _mro_names(cls)
    if "PromptStep" in names:
        return "prompt"
    if "BatchStep" in names:
        return "batch"
    if "AsyncStep" in names:
        return "async"
    if "SourceStep" in names:
        return "source"
    return "step"


@dataclass
class WorkflowNode:
    """One step or resource of a workflow, with the values the workflow sets."""

    id: str
    kind: str  # "step" or "resource"
    name: str  # class name, Graphbook's registry key
    cls: type
    label: Optional[str] = None
    values: Dict[str, Any] = field(default_factory=dict)  # parameter values set in the workflow
    resource_params: Dict[str, str] = field(default_factory=dict)  # parameter -> resource node id
    inputs: List[Tuple[str, str]] = field(default_factory=list)  # (source node id, pin), edge order
    raw: Dict[str, Any] = field(default_factory=dict)  # the node as the editor saved it
    overridable: Set[str] = field(default_factory=set)  # function parameters run config may replace

    @property
    def parameters(self) -> Dict[str, dict]:
        return dict(getattr(self.cls, "Parameters", {}) or {})

    @property
    def outputs(self) -> List[str]:
        return list(getattr(self.cls, "Outputs", ["out"])) if self.kind == "step" else []

    @property
    def step_kind(self) -> str:
        return step_kind(self.cls) if self.kind == "step" else "resource"

    def describe(self) -> str:
        return f"node {self.id} ({self.label or self.name})"


@dataclass
class Workflow:
    """A validated workflow: nodes by id, in topological order."""

    name: str
    nodes: Dict[str, WorkflowNode]
    doc: str = ""
    path: Optional[Path] = None
    overridable_functions: Tuple[str, ...] = ()
    notices: List[str] = field(default_factory=list)  # what was left out at load, as Graphbook does
    gpus: Dict[str, int] = field(default_factory=dict)  # node id -> GPUs its op requests (gpus.py)
    # node id -> {"shards": N} or {"shard_size": K}: batch steps run as shards (plan/shards.py)
    shards: Dict[str, Dict[str, int]] = field(default_factory=dict)
    # node id -> the step's image preview settings (plan/previews.py); steps left out: defaults
    previews: Dict[str, Any] = field(default_factory=dict)
    # runtime settings the source gives (a Graph's ``g.runtime(...)``, ``node.runtime(...)``), in
    # ``GraphbookWorkflow(runtime=)``'s shape: setting -> value for every step, node id -> settings
    runtime_given: Dict[str, Any] = field(default_factory=dict)
    # node id -> the runtime settings its launchpad starts from (plan/settings.py resolve_runtime)
    runtime: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    # (node id, pin) -> the nodes reading it, built on the first ``children`` call: asked per node
    # and pin, a walk over all nodes each time made building a long chain quadratic
    _readers: Optional[Dict[Tuple[str, str], List[WorkflowNode]]] = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def source(self) -> str:
        return str(self.path) if self.path else f"'{self.name}' (Python Graph)"

    def steps(self) -> List[WorkflowNode]:
        return [n for n in self._order() if n.kind == "step"]

    def resources(self) -> List[WorkflowNode]:
        return [n for n in self._order() if n.kind == "resource"]

    def children(self, node_id: str, pin: str) -> List[WorkflowNode]:
        """The nodes reading ``pin`` of ``node_id`` (nodes and edges are fixed once loaded)."""
        if self._readers is None:
            readers: Dict[Tuple[str, str], List[WorkflowNode]] = {}
            for node in self.nodes.values():
                for ref in dict.fromkeys(node.inputs):
                    readers.setdefault(ref, []).append(node)
            self._readers = readers
        return list(self._readers.get((node_id, pin), ()))

    def _order(self) -> List[WorkflowNode]:
        sorter = graphlib.TopologicalSorter(
            {
                n.id: [s for s, _ in n.inputs] + list(n.resource_params.values())
                for n in self.nodes.values()
            }
        )
        return [self.nodes[i] for i in sorter.static_order()]


def unbound_resources(workflow: Workflow) -> List[str]:
    """Each parameter of type ``resource`` that no resource edge feeds and that has no value or
    default, as a problem naming the node and the parameter. Graphbook loads such a workflow and
    passes None, so the step fails only when it first uses it (``'NoneType' object is not
    callable`` at the first batch); a required one is already a load error (``_validated``)."""
    found = []
    for node in workflow.nodes.values():
        for key, spec in node.parameters.items():
            if (
                spec.get("type") != "resource"
                or key in node.resource_params
                or spec.get("required")
                or node.values.get(key) is not None
                or ptypes.default_value(node.cls, key, spec) is not None
            ):
                continue
            found.append(
                f"{node.describe()}: resource parameter {key!r} is connected to no resource "
                f"and has no default, so the {node.kind} receives None and fails when it first "
                f"uses it: draw an edge from a resource node to {key!r} (in Python: "
                f"node.param({key!r}, resource)), or give the parameter a default"
            )
    return found


# ---------------------------------------------------------------------------------------------
# Loading


def load_workflow(
    source: Union[str, Path, Graph],
    registry: Optional[NodeRegistry] = None,
    *,
    name: Optional[str] = None,
    search_path: Sequence[Union[str, Path]] = (),
) -> Workflow:
    """Parse and validate a workflow JSON file, a ``.py`` file defining a ``Graph``, or a ``Graph``.

    A ``.py`` workflow is imported with its own folder and ``search_path`` (the custom node
    folders) on ``sys.path``, so it can ``from my_nodes import MyStep``.
    """
    if isinstance(source, Graph):
        return _from_graph(source, name or source.name or "workflow")
    path = Path(source).resolve()
    if path.suffix == ".py":
        return _from_graph(_graph_from_file(path, search_path), name or path.stem, path=path)
    return _from_json(path, registry or NodeRegistry.load([]), name=name)


def workflow_name(stem: str) -> str:
    """A Dagster-safe name from a file stem: ``SampleWorkflow`` -> ``sample_workflow``."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", stem).lower()
    return re.sub(r"[^a-z0-9_]+", "_", snake).strip("_") or "workflow"


def _graph_from_file(path: Path, search_path: Sequence[Union[str, Path]] = ()) -> Graph:
    import importlib.util
    import sys

    from ..authoring import compat

    compat.install_graphbook_alias()
    spec = importlib.util.spec_from_file_location(
        f"graphbook_workflow_{workflow_name(path.stem)}", path
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    folders = [str(path.parent)] + [str(Path(p).resolve()) for p in search_path if Path(p).is_dir()]
    added = [f for f in folders if f not in sys.path]
    sys.path[:0] = added
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # sys.exit() at import too: a load error, not a silent exit
        raise WorkflowError(
            str(path), [f"the Python workflow failed to import: {import_failure(exc)}"]
        ) from exc
    finally:
        for f in added:
            sys.path.remove(f)
    graph = getattr(module, "_GRAPHBOOK_WORKFLOW_", None) or next(
        (v for v in vars(module).values() if isinstance(v, Graph)), None
    )
    if graph is None:
        raise WorkflowError(
            str(path), ["no Graph found: decorate the function that builds it with @g()"]
        )
    return graph


def _read_json(path: Path) -> Dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkflowError(str(path), [f"cannot read the file: {exc}"]) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkflowError(
            str(path), [f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"]
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise WorkflowError(
            str(path),
            ["not a Graphbook workflow: expected an object with a 'nodes' list (and 'edges')"],
        )
    if not isinstance(data.get("edges", []), list):
        raise WorkflowError(str(path), ["'edges' must be a list"])
    return data


def _from_json(path: Path, registry: NodeRegistry, *, name: Optional[str]) -> Workflow:
    data = _read_json(path)
    problems: List[str] = []
    notices: List[str] = []
    if needs_flattening(data):  # flattening keeps nodes only: name the malformed ones first
        problems += filter(None, (_shape_problem(raw, i) for i, raw in enumerate(data["nodes"])))
        try:
            flat = flatten(data, path.parent, str(path))
        except ValueError as exc:
            raise WorkflowError(str(path), [str(exc)]) from exc
        data, notices = {"nodes": flat.nodes, "edges": flat.edges}, flat.notices
    nodes: Dict[str, WorkflowNode] = {}
    for index, raw in enumerate(data["nodes"]):
        node = _parse_node(raw, index, registry, problems)
        if node is None:
            continue
        if node.id in nodes:
            problems.append(
                f"{node.describe()}: duplicate node id {node.id!r} (also used by "
                f"{nodes[node.id].describe()})"
            )
            continue
        nodes[node.id] = node
    for index, edge in enumerate(data.get("edges", [])):
        _apply_edge(edge, index, nodes, problems)
    doc = _markdown_for(path)
    workflow = Workflow(
        name or workflow_name(path.stem), nodes, doc=doc, path=path, notices=notices
    )
    return _validated(workflow, problems)


def _markdown_for(path: Path) -> str:
    for candidate in (path.with_suffix(".md"), path.parent / "docs" / f"{path.stem}.md"):
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    return ""


def _shape_problem(raw: Any, index: int) -> Optional[str]:
    if not isinstance(raw, dict) or "id" not in raw:
        return f"nodes[{index}]: not a node object with an 'id'"
    return None


def _parse_node(
    raw: Any, index: int, registry: NodeRegistry, problems: List[str]
) -> Optional[WorkflowNode]:
    shape = _shape_problem(raw, index)
    if shape:
        problems.append(shape)
        return None
    node_id, ntype = str(raw["id"]), raw.get("type")
    data = raw.get("data") or {}
    label = data.get("label") or data.get("name")
    where = f"node {node_id} ({label or '?'})"
    if ntype not in SUPPORTED_NODE_TYPES:
        expected = "'step', 'resource', 'group', 'subflow' or 'export'"
        problems.append(f"{where}: unknown node type {ntype!r} (expected {expected})")
        return None
    cls_name = data.get("name")
    if not isinstance(cls_name, str) or not cls_name:
        problems.append(f"{where}: missing data.name (the step or resource class name)")
        return None
    table = registry.steps if ntype == "step" else registry.resources
    if cls_name in registry.ambiguous:
        files = registry.ambiguous[cls_name]
        if len(files) == 1:  # one file: e.g. the docs' @step("MyStep", event=...) per event
            problems.append(
                f"{where}: {cls_name!r} is ambiguous: {files[0]} defines it more than once; "
                f"each @step({cls_name!r}, event=...) builds a class of its own (Graphbook "
                "0.13.3 keeps one and loses the other events), so decorate one function with "
                "@step and attach the other events with @event(...), or rename one"
            )
        else:
            problems.append(
                f"{where}: {cls_name!r} is ambiguous: two different classes of that "
                f"name, in {' and '.join(files)}; Graphbook looks nodes up by class name, "
                "so rename one"
            )
        return None
    cls = table.get(cls_name)
    if cls is None:
        other = registry.resources if ntype == "step" else registry.steps
        hint = (
            f" ({cls_name!r} is a {'resource' if ntype == 'step' else 'step'}, but "
            f"the node's type is {ntype!r})"
            if cls_name in other
            else ""
        )
        problems.append(
            f"{where}: {registry.describe_missing(cls_name, ntype)}{hint}"
            f"{_plugin_hint(data.get('module'), cls_name)}"
        )
        return None
    node = WorkflowNode(node_id, ntype, cls_name, cls, label=data.get("label"), raw=raw)
    declared = node.parameters
    for key, pdata in (data.get("parameters") or {}).items():
        if key not in declared:
            problems.append(
                f"{where}: parameter {key!r} is not a parameter of {cls_name} (its "
                f"parameters: {', '.join(declared) or 'none'})"
            )
            continue
        value = pdata.get("value") if isinstance(pdata, dict) else pdata
        if isinstance(pdata, dict) and "overridable" in pdata:
            _mark_overridable(node, key, pdata["overridable"], where, problems)
        if value is not None:
            node.values[key] = (
                ptypes.dict_from_triples(value) if declared[key].get("type") == "dict" else value
            )
    return node


def _plugin_hint(module: Any, cls_name: str) -> str:
    """A node the editor saved from a plugin package (``module`` like
    ``graphbook_huggingface.hf_datasets``): say which package to install and import."""
    if not isinstance(module, str) or not module or module == "transient_module":
        return ""
    top = module.split(".")[0]
    if top == "graphbook" or not top.isidentifier():
        return ""
    import importlib.util

    installed = importlib.util.find_spec(top) is not None
    return (
        f" (the workflow file records module {module!r} for it"
        f"{'' if installed else f', and {top!r} is not installed'}: if that is a plugin "
        f"package, {'' if installed else 'install it and '}import its nodes in a custom node "
        f"file, e.g. `from {top} import {cls_name}`)"
    )


def _mark_overridable(
    node: WorkflowNode, key: str, flag: Any, where: str, problems: List[str]
) -> None:
    """``"overridable": true`` on a function parameter lets run config replace its code."""
    if not isinstance(flag, bool):
        problems.append(
            f"{where}: parameter {key!r}: 'overridable' must be true or false, got {flag!r}"
        )
    elif flag and node.parameters.get(key, {}).get("type") != "function":
        problems.append(
            f"{where}: parameter {key!r} is marked overridable, but only 'function' "
            "parameters need that (others can always be set from run config)"
        )
    elif flag:
        node.overridable.add(key)


def _apply_edge(edge: Any, index: int, nodes: Dict[str, WorkflowNode], problems: List[str]) -> None:
    if not isinstance(edge, dict):
        problems.append(f"edges[{index}]: not an edge object")
        return
    eid = edge.get("id", f"edges[{index}]")
    src_id, dst_id = str(edge.get("source")), str(edge.get("target"))
    src_pin, dst_pin = edge.get("sourceHandle"), edge.get("targetHandle")
    src, dst = nodes.get(src_id), nodes.get(dst_id)
    for end, nid, node in (("source", src_id, src), ("target", dst_id, dst)):
        if node is None:
            problems.append(f"edge {eid}: {end} node {nid!r} does not exist (or is invalid)")
    if src is None or dst is None:
        return
    if src.kind == "resource" or src_pin == "resource":
        if src.kind != "resource":
            problems.append(
                f"edge {eid}: {src.describe()} is a step; only resources have a 'resource' handle"
            )
        elif dst_pin == "in":
            problems.append(
                f"edge {eid}: resource edge from {src.describe()} into the data input "
                f"'in' of {dst.describe()}; connect it to one of its parameters "
                f"({', '.join(dst.parameters) or 'none'})"
            )
        elif dst_pin not in dst.parameters:
            problems.append(
                f"edge {eid}: {dst.describe()} has no parameter {dst_pin!r} for the "
                f"resource of {src.describe()} (its parameters: "
                f"{', '.join(dst.parameters) or 'none'})"
            )
        else:
            dst.resource_params[dst_pin] = src_id
        return
    if dst.kind != "step" or dst_pin != "in":
        target = "a resource" if dst.kind == "resource" else f"handle {dst_pin!r}"
        problems.append(
            f"edge {eid}: data edge from {src.describe()} pin {src_pin!r} goes to "
            f"{target} of {dst.describe()}; data edges end at 'in'"
        )
        return
    if src_pin not in src.outputs:
        problems.append(
            f"edge {eid}: {src.describe()} has no output pin {src_pin!r} (its pins: "
            f"{', '.join(src.outputs)})"
        )
        return
    if (src_id, src_pin) not in dst.inputs:
        dst.inputs.append((src_id, src_pin))


def _from_graph(graph: Graph, name: str, *, path: Optional[Path] = None) -> Workflow:
    problems: List[str] = []
    nodes: Dict[str, WorkflowNode] = {}
    for wrapper in graph.nodes.values():
        kind = "resource" if isinstance(wrapper, GraphResourceWrapper) else "step"
        node = WorkflowNode(
            wrapper.id,
            kind,
            wrapper.node.__name__,
            wrapper.node,
            raw={"id": wrapper.id, "type": kind, "data": {"name": wrapper.node.__name__}},
        )
        for key, value in wrapper.parameters.items():
            if key not in node.parameters:
                problems.append(
                    f"{node.describe()}: parameter {key!r} is not a parameter of "
                    f"{node.name} (its parameters: "
                    f"{', '.join(node.parameters) or 'none'})"
                )
            elif isinstance(value, GraphResourceWrapper):
                node.resource_params[key] = value.id
            elif isinstance(value, GraphStepWrapper):
                problems.append(
                    f"{node.describe()}: parameter {key!r} is bound to a step; only "
                    "resources can be bound to parameters"
                )
            else:
                node.values[key] = value
        for key in getattr(wrapper, "overridable", ()):
            if key in node.parameters:
                _mark_overridable(node, key, True, node.describe(), problems)
        if isinstance(wrapper, GraphStepWrapper):
            node.inputs = [(src.id, pin) for pin, src in wrapper.deps]
        nodes[node.id] = node
    runtime: Dict[str, Any] = dict(getattr(graph, "runtime_settings", {}))
    for wrapper in graph.get_steps():
        if getattr(wrapper, "runtime_settings", None):
            runtime[wrapper.id] = dict(wrapper.runtime_settings)
    workflow = Workflow(workflow_name(name), nodes, doc=graph.doc, path=path, runtime_given=runtime)
    return _validated(workflow, problems)


# ---------------------------------------------------------------------------------------------
# Validation


def _leave_out_idle(workflow: Workflow) -> None:
    """Drop steps no note can reach (no input edge, not a source), and steps fed only by them.

    Graphbook runs the connected part of such a workflow and never calls the idle step; so do
    we, with a notice naming each step left out.
    """
    nodes = workflow.nodes
    while True:
        idle = [
            n
            for n in nodes.values()
            if n.kind == "step" and n.step_kind in ("step", "batch") and not n.inputs
        ]
        if not idle:
            return
        for node in idle:
            workflow.notices.append(
                f"{node.describe()}: {node.name} has no input edge and is not "
                "a source step; Graphbook does not run it, so it is left out"
            )
            del nodes[node.id]
        gone = {n.id for n in idle}
        for node in nodes.values():
            node.inputs = [(src, pin) for src, pin in node.inputs if src not in gone]


# Step kinds that cannot run under Dagster: why, and what to use instead.
UNSUPPORTED_KINDS = {
    "prompt": (
        "is a human-in-the-loop (PromptStep/@prompt) step, which waits for a person to answer "
        "in Graphbook's UI; a Dagster run has nobody to answer it, so it is not supported. "
        "Decide in code instead (a Step whose route() applies a rule), or label outside the run "
        "and load the answers (e.g. with LoadJSONL)"
    ),
    "async": (
        "subclasses AsyncStep, the queue protocol (in_q, _out_queue) that Graphbook's own "
        "processor loop drains, which Dagster ops do not run, so it is not supported. "
        "Subclass BatchStep for work done in loader/dump worker pools, or Step"
    ),
}


def _validated(workflow: Workflow, problems: List[str]) -> Workflow:
    nodes = workflow.nodes
    _leave_out_idle(workflow)
    for node in nodes.values():
        kind = node.step_kind
        if kind in UNSUPPORTED_KINDS:
            problems.append(f"{node.describe()}: {node.name} {UNSUPPORTED_KINDS[kind]}")
        if kind == "source" and node.inputs:
            problems.append(
                f"{node.describe()}: {node.name} is a source step and takes no input, "
                "but edges enter it"
            )
        for key, spec in node.parameters.items():
            ptype = str(spec.get("type", ""))
            if key in node.resource_params:
                if node.values.get(key) is not None and ptype not in ptypes.EDGE_TYPES:
                    problems.append(
                        f"{node.describe()}: parameter {key!r} has both a value and a resource edge"
                    )
                continue
            value = node.values.get(key)
            problem = ptypes.check_value(ptype, value)
            if problem:
                problems.append(f"{node.describe()}: parameter {key!r} ({ptype}): {problem}")
            if spec.get("required") and value is None and spec.get("default") is None:
                problems.append(
                    f"{node.describe()}: required parameter {key!r} has no value, no "
                    "default and no resource edge"
                )
    for node in nodes.values():
        for src, _ in node.inputs:
            if src in nodes and nodes[src].kind != "step":
                problems.append(
                    f"{node.describe()}: input from {nodes[src].describe()}, which is not a step"
                )
    try:
        graphlib.TopologicalSorter(
            {
                n.id: [s for s, _ in n.inputs] + list(n.resource_params.values())
                for n in nodes.values()
            }
        ).prepare()
    except graphlib.CycleError as exc:
        cycle = exc.args[1]
        problems.append("cycle: " + " -> ".join(nodes[i].describe() for i in cycle))
    if not any(n.kind == "step" for n in nodes.values()) and not problems:
        problems.append("the workflow has no steps")
    if problems:
        raise WorkflowError(workflow.source, problems)
    for notice in workflow.notices:
        logger.warning("%s: %s", workflow.source, notice)
    return workflow
