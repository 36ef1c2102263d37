"""Record the golden outputs of the conformance cases by running them through real Graphbook 0.13.3.

Run by hand, never in CI (CI compares against the committed golden files only)::

    python3.11 -m venv benchmarks/.venv-graphbook
    benchmarks/.venv-graphbook/bin/pip install graphbook==0.13.3
    benchmarks/.venv-graphbook/bin/python tests/conformance/record_golden.py [CASE ...]

Each case folder under ``cases/`` holds a workflow (``.json`` or a ``.py`` Graph), its
``custom_nodes/`` and ``case.json``. A JSON workflow runs as the UI's "Run all" does: the file is
flattened the way the editor flattens it before posting (``serializeForAPI``; our Python port
in ``dagster_graphbook/model/flatten.py``, loaded by path since that function lives in Graphbook's
TypeScript), then ``WebInstanceProcessor`` runs the ``run_all`` command in this process. A
``.py`` workflow runs as ``Graph.run()`` does (``GraphProcessor``). Every note a step emits is
recorded per step id and pin, in emission order, as JSON at the moment it is emitted (steps
pass notes by reference, so later mutations must not leak into earlier steps' records); so
are the errors Graphbook logs. The result goes to ``golden/<case>.json``.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import os
import queue
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Dict, List

from graphbook.core.processing import graph_processor, web_processor

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _load_flatten():
    spec = importlib.util.spec_from_file_location(
        "_gb_flatten", REPO / "dagster_graphbook" / "model" / "flatten.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


class _NoteItems:
    """``note.items`` of an `ItemsNote`: callable as ``dict.items``, subscriptable as the note."""

    def __init__(self, note: dict):
        self._note = note

    def __call__(self):
        return dict.items(self._note)

    def __getitem__(self, key: Any) -> Any:
        return self._note[key]


class ItemsNote(dict):
    """A dict note whose ``items[key]`` is ``note[key]``, as on Graphbook's old ``Note`` class.

    0.13.3's ``SplitByItems``/``SplitItemField`` still read ``data.items[item_key]``, which fails
    on a plain dict; a case with ``"note_items": true`` is recorded a second time with its steps'
    dict inputs made ItemsNotes, so the golden also holds what those classes do when they work.
    """

    @property
    def items(self) -> _NoteItems:
        return _NoteItems(self)


class Recorder:
    """Outputs per step and pin, and the errors Graphbook logs, for one run."""

    def __init__(self, note_items: bool = False):
        self.outputs: Dict[str, Dict[str, List[Any]]] = {}
        self.errors: List[str] = []
        self.note_items = note_items

    def wrap(self, processor: Any) -> None:
        original = processor.exec_step

        def exec_step(step, input=None, flush=False):
            if self.note_items and type(input) is dict:
                input = ItemsNote(input)
            out = original(step, input, flush) if flush else original(step, input)
            if out:
                pins = self.outputs.setdefault(step.id, {})
                for pin, notes in out.items():
                    pins.setdefault(pin, []).extend(_jsonable(copy.deepcopy(n)) for n in notes)
            return out

        processor.exec_step = exec_step

    def log(self, msg: Any, type: str = "info") -> None:
        if type == "error":
            self.errors.append(str(msg))


def _js_truthy(value: Any) -> bool:
    """JavaScript truthiness, as ``serializeForAPI`` tests ``param.value``: ``[]`` is true."""
    return value is not None and value is not False and value != "" and value != 0


def api_form(flat_nodes: List[dict], flat_edges: List[dict]):
    """The editor's posted form: ``{step_id: {name, parameters, inputs}}`` and resources."""
    steps, resources = {}, {}
    for node in flat_nodes:
        params = {}
        for key, p in (node.get("data", {}).get("parameters") or {}).items():
            if isinstance(p, dict) and "value" not in p:
                continue  # JS undefined: JSON.stringify drops the key, the class default applies
            value = p.get("value") if isinstance(p, dict) else p
            # the editor parses a dict widget's triples when the value is JS-truthy ([] is)
            if isinstance(p, dict) and p.get("type") == "dict" and _js_truthy(value):
                value = {k: v for _, k, v in value}
            params[key] = value
        entry = {"name": node["data"]["name"], "parameters": params}
        if node["type"] == "step":
            steps[node["id"]] = {**entry, "inputs": []}
        else:
            resources[node["id"]] = entry
    for edge in flat_edges:
        target = steps.get(edge["target"]) or resources.get(edge["target"])
        if target is None:
            continue
        if edge["targetHandle"] == "in":
            target["inputs"].append({"node": edge["source"], "slot": edge["sourceHandle"]})
        else:
            target["parameters"][edge["targetHandle"]] = {
                "node": edge["source"],
                "slot": "resource",
            }
    return steps, resources


def run_json(case_dir: Path, workflow: Path, recorder: Recorder) -> str:
    data = json.loads(workflow.read_text())
    flatten = _load_flatten()
    flat = flatten.flatten(data, workflow.parent, str(workflow))
    steps, resources = api_form(flat.nodes, flat.edges)
    sys.path.insert(
        0, str(case_dir)
    )  # Graphbook's AppClientPool puts the workflow folder on sys.path
    processor = web_processor.WebInstanceProcessor(
        None,
        queue.Queue(),
        continue_on_failure=False,
        copy_outputs=False,
        workflow_path=case_dir,
        custom_nodes_path=case_dir / "custom_nodes",
        spawn=False,
        num_workers=1,
    )
    recorder.wrap(processor)
    web_processor.log = recorder.log
    web_processor.ExecutionContext.update(dataloader=processor.dataloader)  # as its start_loop does
    update_state = processor.graph_state.update_state

    def recorded_update_state(graph, resources):
        try:
            return update_state(graph, resources)
        except Exception as exc:  # Graphbook logs it and runs nothing; the golden keeps the reason
            recorder.errors.append(f"{type(exc).__name__}: {exc}")
            raise

    processor.graph_state.update_state = recorded_update_state
    try:
        processor._exec(
            {"cmd": "run_all", "filename": workflow.name, "graph": steps, "resources": resources}
        )
    finally:
        processor.cleanup()
    return "WebInstanceProcessor run_all (the UI's Run all) on the editor-flattened graph"


def run_py(case_dir: Path, workflow: Path, recorder: Recorder) -> str:
    sys.path[:0] = [str(workflow.parent), str(case_dir / "custom_nodes")]
    spec = importlib.util.spec_from_file_location("conformance_workflow", workflow)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: the file's own g.run() stays unused
    graph = module._GRAPHBOOK_WORKFLOW_
    processor = graph_processor.GraphProcessor(queue.Queue(), True, 1, None)
    recorder.wrap(processor)
    graph_processor.log = recorder.log
    try:
        processor.run(graph, workflow.stem)
    finally:
        processor.dataloader.shutdown()
    return "GraphProcessor (Graph.run())"


def record(case_dir: Path) -> Dict[str, Any]:
    meta = json.loads((case_dir / "case.json").read_text())
    result = _record_run(case_dir, meta, Recorder())
    if meta.get("note_items"):
        again = _record_run(case_dir, meta, Recorder(note_items=True))
        result["note_items"] = {k: again[k] for k in ("load_error", "errors", "outputs", "files")}
    return result


def _record_run(case_dir: Path, meta: Dict[str, Any], recorder: Recorder) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:  # steps that write files write them here
        work = Path(tmp) / case_dir.name
        shutil.copytree(case_dir, work)
        cwd = os.getcwd()
        os.chdir(work)
        error = None
        try:
            workflow = work / meta["workflow"]
            runner = run_py if workflow.suffix == ".py" else run_json
            reference = runner(work, workflow, recorder)
        except (
            Exception
        ) as exc:  # a load failure is a result too (e.g. an import that 0.13.3 lacks)
            reference = "load"
            error = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        finally:
            os.chdir(cwd)
        files = {}
        for name in meta.get("files", []):
            path = work / name
            files[name] = path.read_text() if path.exists() else None
    return {
        "case": case_dir.name,
        "graphbook": importlib.metadata.version("graphbook"),
        "reference": reference,
        "load_error": error,
        "errors": recorder.errors,
        "outputs": recorder.outputs,
        "files": files,
    }


# Modules that node files, plugins and Python workflows import (the rest of the package is
# Graphbook's server: cli, clients, dataloading, viewer, web, ...).
SURFACE = [
    "graphbook",
    "graphbook.core",
    "graphbook.core.steps",
    "graphbook.core.steps.base",
    "graphbook.core.steps.io",
    "graphbook.core.resources",
    "graphbook.core.resources.base",
    "graphbook.core.decorators",
    "graphbook.core.utils",
    "graphbook.core.note",
    "graphbook.core.prompts",
    "graphbook.core.serialization",
    "graphbook.core.plugins",
    "graphbook.core.processing",
    "graphbook.core.processing.graph_processor",
]


def import_surface() -> Dict[str, List[str]]:
    """Public names of each surface module: Graphbook's own classes, functions and submodules."""
    import inspect
    import types

    out = {}
    for name in SURFACE:
        module = importlib.import_module(name)
        names = []
        for key, value in vars(module).items():
            if key.startswith("_"):
                continue
            if isinstance(value, types.ModuleType):
                if value.__name__.startswith("graphbook"):
                    names.append(key)
            elif (
                inspect.isclass(value) or inspect.isfunction(value)
            ) and value.__module__.startswith("graphbook"):
                names.append(key)
        out[name] = sorted(names)
    return out


def main(argv: List[str]) -> None:
    if not argv:
        surface = {
            "graphbook": importlib.metadata.version("graphbook"),
            "modules": import_surface(),
        }
        (HERE / "golden" / "import_surface.json").write_text(
            json.dumps(surface, indent=1, sort_keys=True) + "\n"
        )
    cases = sorted(p for p in (HERE / "cases").iterdir() if (p / "case.json").exists())
    if argv:
        cases = [c for c in cases if c.name in argv]
    for case_dir in cases:
        result = record(case_dir)
        out = HERE / "golden" / f"{case_dir.name}.json"
        out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        counts = {s: {p: len(n) for p, n in pins.items()} for s, pins in result["outputs"].items()}
        print(f"{case_dir.name}: {result['reference']}; errors {len(result['errors'])}; {counts}")


if __name__ == "__main__":
    main(sys.argv[1:])
