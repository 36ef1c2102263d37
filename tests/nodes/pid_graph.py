"""Nodes of tests/e2e/test_cli_executor.py (WORKFLOW)."""

from pid_nodes import Check, Numbers

from graphbook import Graph

g = Graph()


@g()
def _():
    numbers = g.step(Numbers)
    check = g.step(Check)
    check.bind(numbers)
