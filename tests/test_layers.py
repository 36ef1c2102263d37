"""The layer rule (docs/architecture.md): ``dagster_graphbook``'s stage packages import only
downward, counting imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import dagster_graphbook

PACKAGE = Path(dagster_graphbook.__file__).parent

# Bottom to top. A stage may import its own modules and any stage with a lower rank.
RANK = {
    "errors": 0,
    "dagster_internals": 0,
    "authoring": 1,  # Graphbook's API: what ``import graphbook`` is
    "model": 2,  # what a workflow file says
    "plan": 3,  # compiled once: names, settings, the plan
    "store": 4,  # notes on disk
    "execution": 5,  # runs steps
    "defs": 6,  # Dagster definitions from a plan
    "integrations": 6,
    "runner": 7,  # run_workflow, run_job: the Python API
    "cli": 8,  # the terminal
    "__init__": 9,  # the Dagster face
}


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[str, str]]:
    """(importing module, imported module) for every ``dagster_graphbook`` import in ``path``."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    module = ".".join(rel.parts)
    package = module.rpartition(".")[0]
    if rel.name == "__init__":
        module = package = module.removesuffix(".__init__")
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            targets = [".".join(base + ([node.module] if node.module else []))]
        elif isinstance(node, ast.ImportFrom):
            targets = [node.module or ""]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        found += [(module, t) for t in targets if t.split(".")[0] == "dagster_graphbook"]
    return found


def test_every_stage_has_a_rank():
    stages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    stages |= {p.stem for p in PACKAGE.glob("*.py")}
    assert stages - set(RANK) == set(), "a new stage needs a rank here and in docs/architecture.md"


def test_imports_point_only_down():
    upward = []
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 60
    for path in modules:
        for source, target in _imports(path):
            s, t = _stage(source), _stage(target)
            if s != t and RANK[t] > RANK[s]:
                upward.append(f"{source} -> {target}")
    assert upward == []
