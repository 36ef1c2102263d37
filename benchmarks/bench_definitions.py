"""By-hand benchmark: seconds to build the Definitions of an N-step workflow, and how they grow.

    .venv/bin/python benchmarks/bench_definitions.py [--sizes 250 500 1000 2000] [--repeats 3]
        [--shape chain|fan]

Not a test. Writes a workflow JSON (indented, as the editor saves it) of N trivial steps of one
custom node file (``chain``: each step reads the one before it, in chains of at most
``MAX_CHAIN_DEPTH`` steps each starting at a source, so 2,000 steps are two chains of 1,000;
``fan``: one source read by N - 1 steps). Each repeat is a fresh Python process that imports the
package, builds a 2-step workflow once (first calls), then times
``build_definitions([GraphbookWorkflow(file, custom_nodes=...)], strict=True)`` for the N-step one:
what a code location does on load.

Prints, per N, the median, min and max of the successful builds in wall and CPU seconds (CPU
time is steadier on a busy machine), the ratio of medians to the previous N with the ratio per
doubling of N in brackets (linear: 2.0; issue 20.8's target: <= 2.3), and how many builds failed
(retried, up to ``--repeats`` failures: Dagster's job resolution can exceed Python's recursion
limit on a chain of about 1,000 steps, depending on the order it walks the steps in).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent

NODES = """
from graphbook.steps import SourceStep, Step


class Start(SourceStep):
    RequiresInput = False
    Outputs = ["out"]
    Parameters = {}

    def load(self):
        return {"out": [{"v": 0}]}


class Inc(Step):
    RequiresInput = True
    Outputs = ["out"]
    Parameters = {}
"""

CHILD = """
import sys, time
from dagster_graphbook import GraphbookWorkflow, build_definitions

warm, path, nodes = sys.argv[1:4]
build_definitions([GraphbookWorkflow(warm, custom_nodes=[nodes])], strict=True)
wall, cpu = time.perf_counter(), time.process_time()
build_definitions([GraphbookWorkflow(path, custom_nodes=[nodes])], strict=True)
print(time.perf_counter() - wall, time.process_time() - cpu)
"""


def _node(node_id: int, name: str, source: bool) -> dict:
    data = {"name": name, "parameters": {}, "inputs": [] if source else ["in"], "outputs": ["out"]}
    return {"id": str(node_id), "type": "step", "position": {"x": 0, "y": 0}, "data": data}


def write_workflow(path: Path, steps: int, shape: str, depth: int) -> Path:
    """``steps`` steps of shape ``chain`` (chains of at most ``depth``) or ``fan``."""
    nodes, edges = [], []
    for i in range(steps):
        if shape == "chain":
            parent = None if i % depth == 0 else i - 1
        else:
            parent = None if i == 0 else 0
        nodes.append(_node(i, "Start" if parent is None else "Inc", parent is None))
        if parent is not None:
            edges.append(
                {
                    "id": f"e{i}",
                    "source": str(parent),
                    "sourceHandle": "out",
                    "target": str(i),
                    "targetHandle": "in",
                }
            )
    path.write_text(
        json.dumps({"version": "0", "type": "workflow", "nodes": nodes, "edges": edges}, indent=2)
    )
    return path


def time_build(warm: Path, path: Path, nodes: Path) -> Optional[Tuple[float, float]]:
    """Wall and CPU seconds of one build of ``path``, in a fresh process (``None``: it failed,
    its error printed)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(warm), str(path), str(nodes)],
        cwd=path.parent,  # "-c" puts the working directory first on sys.path: not a checkout
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        print(f"  {path.name} failed: {out.stderr.strip().splitlines()[-1]}")
        return None
    wall, cpu = out.stdout.split()[-2:]
    return float(wall), float(cpu)


def _cell(values: List[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def _growth(rows: List[tuple], i: int, col: int) -> str:
    """Median over the previous row's, and as a ratio per doubling of N (where N doubles: equal)."""
    if i == 0:
        return "-"
    (prev_n, *prev), (n, *cur) = rows[i - 1], rows[i]
    ratio = statistics.median(cur[col]) / statistics.median(prev[col])
    return f"{ratio:.2f} ({ratio ** (1 / math.log2(n / prev_n)):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shape", choices=["chain", "fan"], default="chain")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from dagster_graphbook.defs.definitions import MAX_CHAIN_DEPTH

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        nodes = root / "nodes"
        nodes.mkdir()
        (nodes / "chain_nodes.py").write_text(NODES)
        warm = write_workflow(root / "warm.json", 2, "chain", MAX_CHAIN_DEPTH)
        rows: List[tuple] = []
        for n in args.sizes:
            path = write_workflow(root / f"{args.shape}_{n}.json", n, args.shape, MAX_CHAIN_DEPTH)
            times: List[Tuple[float, float]] = []
            failed = 0
            while len(times) < args.repeats and failed <= args.repeats:
                built = time_build(warm, path, nodes)
                times += [built] if built else []
                failed += not built
            if not times:
                raise SystemExit(f"every build of {n} steps failed")
            rows.append((n, [t[0] for t in times], [t[1] for t in times], failed))
            print(f"  N={n}: " + ", ".join(f"{w:.2f} s ({c:.2f} CPU)" for w, c in times))
    shape = f"chains of at most {MAX_CHAIN_DEPTH} steps" if args.shape == "chain" else "fan"
    print(f"\nbuild_definitions, {args.shape} ({shape}), {args.repeats} processes per N")
    header = ["steps", "wall s (min-max)", "CPU s (min-max)", "wall x prev.", "CPU x prev."]
    print("| " + " | ".join(header + ["failed builds"]) + " |\n|" + " --- |" * (len(header) + 1))
    for i, (n, wall, cpu, failed) in enumerate(rows):
        cells = [str(n), _cell(wall), _cell(cpu), _growth(rows, i, 0), _growth(rows, i, 1)]
        cells.append(str(failed))
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
