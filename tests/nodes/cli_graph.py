"""Nodes of tests/e2e/test_cli_errors.py (GRAPH)."""

import sys

sys.path.insert(0, "nodes")
from photo import images as Images
from photo import split_by_score as SplitByScore

from graphbook import Graph

g = Graph()


@g()
def _():
    split = g.step(SplitByScore)
    split.param("threshold", -1)
    split.bind(g.step(Images))


if __name__ == "__main__":
    g.run()
