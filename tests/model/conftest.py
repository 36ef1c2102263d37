"""What the model tests share: the sample workflow's node registry."""

from __future__ import annotations

import pytest

from dagster_graphbook import NodeRegistry


@pytest.fixture(scope="module")
def sample_registry(repo):
    return NodeRegistry.load([repo / "custom_nodes" / "sample"])
