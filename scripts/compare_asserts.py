"""Compare the assertions of the test suite between a git revision and the working tree.

For every test function (``path::Class::test_name``) the multiset of its ``assert``
statements and its ``pytest.raises(...)`` calls (with their ``match=``), each as
``ast.unparse`` writes it, nested functions included. Helper functions and methods outside
tests are compared by qualified name across the whole tree (``helper::Class.name``), so that
a helper moved to another module (tests/conftest.py -> tests/support/) still matches. Node code
under tests/nodes/ is left out: it was text in strings at the revision, where no assert shows.

    python scripts/compare_asserts.py [REV] [--allow PATH ...]

exits 1 if any test's or helper's assertions differ; ``--allow`` names files whose new tests
are expected (their tests may appear, never change or vanish)."""

from __future__ import annotations

import argparse
import ast
import collections
import subprocess
import sys
from pathlib import Path
from typing import Counter, Dict, Iterator, Tuple

ROOT = Path(__file__).resolve().parent.parent


def _checks(func: ast.AST) -> Counter[str]:
    """The asserts and pytest.raises calls under ``func`` (nested functions included)."""
    found: Counter[str] = collections.Counter()
    for node in ast.walk(func):
        if isinstance(node, ast.Assert):
            found[
                "assert "
                + ast.unparse(node.test)
                + (f", {ast.unparse(node.msg)}" if node.msg else "")
            ] += 1
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "raises"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "pytest"
        ):
            found[ast.unparse(node)] += 1
    return found


def _functions(tree: ast.Module) -> Iterator[Tuple[str, ast.AST]]:
    """(qualified name, node) of module-level functions and methods of module-level classes."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{item.name}", item


def collect(sources: Dict[str, str]) -> Dict[str, Counter[str]]:
    out: Dict[str, Counter[str]] = collections.defaultdict(collections.Counter)
    for path, text in sources.items():
        tree = ast.parse(text, path)
        for name, func in _functions(tree):
            is_test = name.split(".")[-1].startswith("test_") and Path(path).name.startswith(
                "test_"
            )
            key = f"{path}::{name.replace('.', '::')}" if is_test else f"helper::{name}"
            checks = _checks(func)
            if is_test or checks:
                out[key] += checks
    return out


def at_revision(rev: str) -> Dict[str, str]:
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {
        n: subprocess.run(
            ["git", "show", f"{rev}:{n}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        for n in names
        if n.endswith(".py") and not _node_code(n)
    }


def in_tree() -> Dict[str, str]:
    return {
        str(p.relative_to(ROOT)): p.read_text()
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if "__pycache__" not in p.parts and not _node_code(str(p.relative_to(ROOT)))
    }


def _node_code(path: str) -> bool:
    """A module of tests/nodes/, left out on both sides (its asserts are the nodes' own)."""
    return Path(path).parent.name == "nodes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", nargs="?", default="main")
    parser.add_argument(
        "--allow", action="append", default=[], help="files whose new tests are expected"
    )
    args = parser.parse_args()
    old, new = collect(at_revision(args.rev)), collect(in_tree())
    tests_old = [k for k in old if not k.startswith("helper::")]
    bad = 0
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, collections.Counter()), new.get(key, collections.Counter())
        if a == b:
            continue
        if key not in old and any(key.startswith(f + "::") for f in args.allow):
            continue
        bad += 1
        print(f"DIFFERS {key}")
        for line in sorted((a - b).elements()):
            print(f"  - {line}")
        for line in sorted((b - a).elements()):
            print(f"  + {line}")
    n_asserts = sum(sum(c.values()) for k, c in old.items() if not k.startswith("helper::"))
    helpers = sum(1 for k in old if k.startswith("helper::"))
    print(
        f"{args.rev}: {len(tests_old)} tests, {n_asserts} assertions/raises in tests, "
        f"{helpers} helpers with assertions; working tree: "
        f"{sum(1 for k in new if not k.startswith('helper::'))} tests; "
        f"{'identical' if not bad else f'{bad} differ'}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
