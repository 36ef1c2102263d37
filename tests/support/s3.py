"""A real S3-compatible server: moto's server mode on 127.0.0.1, s3fs as the fsspec driver."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import pytest

from tests.support.network import free_port


@dataclasses.dataclass
class Bucket:
    """A bucket on the test's moto server: ``url`` (``s3://<name>``), the server's ``endpoint``
    and an ``s3fs`` filesystem reading it fresh."""

    name: str
    endpoint: str
    fs: Any

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    def objects(self, prefix: str = "") -> Dict[str, int]:
        """Every object under ``s3://<name>/<prefix>`` (key -> bytes), listed fresh."""
        self.fs.invalidate_cache()
        found = self.fs.find(f"{self.name}/{prefix}".rstrip("/"), detail=True)
        return {key[len(self.name) + 1 :]: info["size"] for key, info in found.items()}


@contextlib.contextmanager
def moto_server(log: Optional[Path] = None) -> Iterator[str]:
    """A moto server of its own (``python -m moto.server``) on a free port of 127.0.0.1, stopped
    at the end; its endpoint URL. ``log``: a file for its output, a line per request served."""
    pytest.importorskip("moto.server", reason="moto[server] (dev extra) is not installed")
    pytest.importorskip("s3fs", reason="s3fs (the s3 extra) is not installed")
    import requests

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with contextlib.ExitStack() as files:  # the server keeps its own copy of the log's fd
        err = files.enter_context(log.open("w")) if log else subprocess.DEVNULL
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,  # werkzeug's access log: a line per request
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(endpoint, timeout=2)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, "moto's server exited at start"
                assert time.monotonic() < deadline, "moto's server did not answer in 60 s"
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        try:  # a server still serving a slow request may outlast a loaded machine's 10 s
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def s3_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Point boto (in this process and the processes it starts) at ``endpoint`` with dummy
    credentials, and drop s3fs's cached filesystems (they keep the endpoint they connected to)."""
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()
