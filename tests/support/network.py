"""Loopback networking for tests: a free port, and a listener that records who connected."""

from __future__ import annotations

import dataclasses
from typing import Any, List


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Listener:
    """A TCP listener on 127.0.0.1 of the test's own: ``connections`` holds every connection
    made to ``port`` (what a preview or a page must never reach)."""

    port: int
    connections: List[Any]
