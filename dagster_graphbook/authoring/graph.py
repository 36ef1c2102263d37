"""Graphbook's Python workflow API: ``Graph``, ``g.step``, ``g.resource``, ``param``, ``bind``,
``@g()``."""

from __future__ import annotations

import inspect
import os
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .executors import Executor

__all__ = ["Graph", "GraphNodeWrapper", "GraphStepWrapper", "GraphResourceWrapper"]

# What ``Graph.run`` runs a graph with: ``runner.run_workflow``, registered by the runner when it
# is imported (``import dagster_graphbook`` imports it), so the authoring API does not import the
# runner back.
_run_workflow: Optional[Callable[..., Any]] = None


def register_runner(run_workflow: Callable[..., Any]) -> None:
    """Make ``run_workflow`` (``runner.run_workflow``'s signature) what ``Graph.run`` calls."""
    global _run_workflow
    _run_workflow = run_workflow


class GraphNodeWrapper:
    """A node of a `Graph`: its class, id and parameter values (a value or a resource wrapper)."""

    kind = "node"

    def __init__(self, node: type, id: str):
        self.node = node
        self.id = id
        self.parameters: Dict[str, Any] = {}
        self.overridable: Set[str] = set()

    def param(self, key: str, arg: Any, *, overridable: bool = False) -> GraphNodeWrapper:
        """Set parameter ``key``; ``overridable=True`` lets run config replace a ``function``
        parameter's code."""
        self.parameters[key] = arg
        if overridable:
            self.overridable.add(key)
        else:
            self.overridable.discard(key)
        return self


class GraphStepWrapper(GraphNodeWrapper):
    kind = "step"

    def __init__(self, node: type, id: str):
        super().__init__(node, id)
        self.deps: List[Tuple[str, GraphStepWrapper]] = []
        self.runtime_settings: Dict[str, Any] = {}

    def runtime(self, **settings: Any) -> GraphStepWrapper:
        """This step's run settings (``on_item_error="skip"``, ``num_workers=4``, ...: the
        launchpad's ``runtime`` block), which its schedule, sensor, backfill and launchpad runs
        start from; a run's config still changes them. Over the graph's ``g.runtime(...)``."""
        self.runtime_settings.update(settings)
        return self

    def bind(self, src: GraphStepWrapper, key: str = "out") -> GraphStepWrapper:
        """Feed this step with the notes of ``src``'s pin ``key``."""
        outputs = getattr(src.node, "Outputs", ["out"])
        if key not in outputs:
            raise ValueError(
                f"Output slot {key!r} not found in {src.node.__name__}'s outputs {outputs}"
            )
        self.deps.append((key, src))
        return self


class GraphResourceWrapper(GraphNodeWrapper):
    kind = "resource"


class Graph:
    """A workflow written in Python. Ids are "0", "1", ... in creation order, as in Graphbook."""

    def __init__(self) -> None:
        self.nodes: Dict[str, GraphNodeWrapper] = {}
        self.doc = ""
        self.module_name: Optional[str] = None
        self.name: Optional[str] = None
        self.runtime_settings: Dict[str, Any] = {}

    def runtime(self, **settings: Any) -> None:
        """Run settings for every step that has them (``on_item_error="skip"`` for all steps,
        ``num_workers=4`` for the batch steps), which runs start from unless their config
        changes them; ``node.runtime(...)`` sets one step's."""
        self.runtime_settings.update(settings)

    def _add(self, wrapper_cls: type, node: type) -> Any:
        if not isinstance(node, type):
            raise TypeError(f"pass the class, not an instance: got {node!r}")
        wrapper = wrapper_cls(node, str(len(self.nodes)))
        self.nodes[wrapper.id] = wrapper
        return wrapper

    def step(self, n: type) -> GraphStepWrapper:
        return self._add(GraphStepWrapper, n)

    def resource(self, n: type) -> GraphResourceWrapper:
        return self._add(GraphResourceWrapper, n)

    def md(self, text: str) -> None:
        self.doc = inspect.cleandoc(text)

    def get_steps(self) -> List[GraphStepWrapper]:
        return [n for n in self.nodes.values() if isinstance(n, GraphStepWrapper)]

    def get_resources(self) -> List[GraphResourceWrapper]:
        return [n for n in self.nodes.values() if isinstance(n, GraphResourceWrapper)]

    def __call__(self) -> Callable[[Callable[[], None]], None]:
        """``@g()``: build the graph now and mark the module as holding a workflow."""

        def decorator(fn: Callable[[], None]) -> None:
            fn()
            self.module_name = fn.__code__.co_filename
            if self.name is None:
                self.name = os.path.splitext(os.path.basename(self.module_name))[0]
            fn.__globals__["_GRAPHBOOK_WORKFLOW_"] = self
            return None

        return decorator

    def get_subgraph(self, step_id: str) -> Graph:
        """The step, its ancestors and the resources they use."""
        keep: Dict[str, GraphNodeWrapper] = {}

        def visit(node: GraphNodeWrapper) -> None:
            if node.id in keep:
                return
            keep[node.id] = node
            for value in node.parameters.values():
                if isinstance(value, GraphResourceWrapper):
                    visit(value)
            for _, parent in getattr(node, "deps", []):
                visit(parent)

        visit(self.nodes[step_id])
        sub = Graph()
        sub.nodes = {i: n for i, n in self.nodes.items() if i in keep}
        sub.doc, sub.module_name, sub.name = self.doc, self.module_name, self.name
        sub.runtime_settings = dict(self.runtime_settings)
        return sub

    def serialize(self) -> dict:
        """The JSON-able form Graphbook's UI shows for Python workflows."""
        out: Dict[str, Any] = {}
        for node in self.nodes.values():
            params = {}
            for key, spec in getattr(node.node, "Parameters", {}).items():
                value = node.parameters.get(key)
                params[key] = {
                    **spec,
                    "value": {"node": value.id, "slot": "resource"}
                    if isinstance(value, GraphResourceWrapper)
                    else value,
                }
                if key in node.overridable:
                    params[key]["overridable"] = True
            out[node.id] = {
                "type": node.kind,
                "name": node.node.__name__,
                "parameters": params,
                "category": getattr(node.node, "Category", ""),
                "doc": node.node.__doc__ or "",
                "module": node.node.__module__,
                "inputs": [{"node": src.id, "pin": pin} for pin, src in getattr(node, "deps", [])],
                "outputs": list(getattr(node.node, "Outputs", [])) if node.kind == "step" else [],
            }
        return {"doc": self.doc, "G": out}

    def run(
        self,
        executor: Any = None,
        step_id: Optional[str] = None,
        start_web_server: bool = True,
        host: str = "localhost",
        port: int = 8005,
        **kwargs: Any,
    ) -> Any:
        """Run through Dagster (in-process, persistent instance); returns notes per step and pin.

        Graphbook's arguments are accepted so ``g.run()`` scripts run unchanged: ``step_id`` runs
        that step and its ancestors; an executor picks where steps run through its
        ``run_options`` (``graphbook.ray.RayExecutor``: dagster-ray's executor), Graphbook's
        default one runs them here; the web-server arguments are not used (the Dagster UI shows
        the run). Prints one summary line, as a script's user expects output; a
        failed run raises, naming the step. It records into ``$DAGSTER_HOME`` (else
        ``./.dagster_home``) as such scripts always did; ``record=False`` makes it a try-out.
        """
        if _run_workflow is None:
            raise RuntimeError(
                "Graph.run has no runner: dagster_graphbook.runner.run registers it when imported; "
                "import dagster_graphbook (or run the workflow with dagster_graphbook.run_workflow)"
            )
        graph = self.get_subgraph(step_id) if step_id is not None else self
        kwargs.setdefault("record", True)
        if isinstance(executor, Executor):
            kwargs = {**executor.run_options(), **kwargs}
        run = _run_workflow(graph, **kwargs)
        name = self.name or "graph"
        if not run.success:  # the failure once (Dagster's console logger leaves it to us)
            raise RuntimeError(f"workflow {name} failed: {run.failure}\n{run.log_hint()}")
        counts = "; ".join(f"{s} {pins}" for s, pins in run.counts().items())
        print(
            f"workflow {name}: Dagster run {run.run_id} succeeded in {run.seconds:.1f} s "
            f"(notes per step and pin: {counts})"
        )
        return run
