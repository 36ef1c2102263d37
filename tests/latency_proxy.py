"""An HTTP proxy on 127.0.0.1 in front of an S3 server (moto's), adding a fixed latency to each
request and counting what it forwards: the requests in flight at once (their most, of all and
of each kind: method and Range header, ``GET bytes=0-`` being a whole object's read), and each
request by method, path and Range. Used by ``tests/e2e/test_bucket_storage.py`` (requests in flight
during a day's batch step) and ``benchmarks/bench_bucket.py`` (what a 20-50 ms bucket costs).

    python tests/latency_proxy.py --upstream http://127.0.0.1:5000 --latency-ms 50 --port 0

prints ``listening on http://127.0.0.1:<port>`` once it serves. Its own two paths answer without
being forwarded: ``GET /__proxy__/stats`` (JSON: ``requests``, ``max_in_flight``, ``by_request``
as ``"<METHOD> <path>[ <range>]" -> count``, ``max_in_flight_by`` as ``"<METHOD>[ <range>]" ->
most``) and ``POST /__proxy__/reset`` (counts back to zero). Clients
point at it with ``AWS_ENDPOINT_URL``; the Host header is forwarded as the client sent it, so
its request signatures still match.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, Optional

import requests

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
}


class Counts:
    """What the proxy forwarded since its last reset."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self.by_request: collections.Counter = collections.Counter()
        self.kinds: collections.Counter = collections.Counter()  # in flight now, per kind
        self.max_in_flight_by: Dict[str, int] = {}

    def start(self, method: str, path: str, range_: str) -> str:
        kind = f"{method} {range_}".strip()
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.kinds[kind] += 1
        self.max_in_flight_by[kind] = max(self.max_in_flight_by.get(kind, 0), self.kinds[kind])
        self.by_request[f"{method} {path} {range_}".strip()] += 1
        return kind

    def end(self, kind: str) -> None:
        self.in_flight -= 1
        self.kinds[kind] -= 1

    def as_json(self) -> Dict[str, Any]:
        return {
            "requests": self.requests,
            "max_in_flight": self.max_in_flight,
            "by_request": dict(self.by_request),
            "max_in_flight_by": dict(self.max_in_flight_by),
        }


def make_app(upstream: str, latency_s: float) -> Any:
    from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

    counts = Counts()
    session: Dict[str, ClientSession] = {}

    async def start(app: Any) -> None:
        session["s"] = ClientSession(
            connector=TCPConnector(limit=0), timeout=ClientTimeout(total=120), auto_decompress=False
        )

    async def stop(app: Any) -> None:
        await session["s"].close()

    async def handle(request: Any) -> Any:
        if request.path == "/__proxy__/stats":
            return web.json_response(counts.as_json())
        if request.path == "/__proxy__/reset":
            counts.reset()
            return web.json_response({})
        kind = counts.start(request.method, request.path, request.headers.get("Range", ""))
        try:
            body = await request.read()
            await asyncio.sleep(latency_s)
            headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
            async with session["s"].request(
                request.method,
                upstream + request.path_qs,
                headers=headers,
                data=body,
                allow_redirects=False,
                skip_auto_headers=("User-Agent", "Content-Type", "Accept-Encoding"),
            ) as reply:
                data = await reply.read()
                out = {k: v for k, v in reply.headers.items() if k.lower() not in HOP_BY_HOP}
                if request.method == "HEAD":  # no body: the object's size is its header's
                    length = reply.headers.get("Content-Length")
                    if length is not None:
                        out["Content-Length"] = length
                    return web.Response(status=reply.status, headers=out)
                return web.Response(status=reply.status, headers=out, body=data)
        finally:
            counts.end(kind)

    app = web.Application(client_max_size=2**30)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def main() -> None:
    from aiohttp import web

    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    async def serve() -> None:
        runner = web.AppRunner(make_app(args.upstream.rstrip("/"), args.latency_ms / 1000))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


class Proxy:
    """A running proxy (``latency_proxy``): its ``endpoint``, its counts read over HTTP."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def stats(self) -> Dict[str, Any]:
        return requests.get(f"{self.endpoint}/__proxy__/stats", timeout=10).json()

    def reset(self) -> None:
        requests.post(f"{self.endpoint}/__proxy__/reset", timeout=10)


@contextlib.contextmanager
def latency_proxy(upstream: str, latency_ms: float, port: int = 0) -> Iterator[Proxy]:
    """The proxy in a process of its own (the client's own work never delays it), stopped at
    the end."""
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--upstream", upstream,
         "--latency-ms", str(latency_ms), "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        line = _first_line(proc, deadline=time.monotonic() + 30)
        yield Proxy(line.rsplit(" ", 1)[1])
    finally:
        proc.terminate()
        try:  # a server still serving a slow request may outlast a loaded machine's 10 s
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def _first_line(proc: subprocess.Popen, deadline: float) -> str:
    assert proc.stdout is not None
    line: Optional[str] = proc.stdout.readline()
    if not line or not line.startswith("listening on ") or time.monotonic() > deadline:
        raise RuntimeError(f"the latency proxy did not start (exit code {proc.poll()})")
    return line.strip()


if __name__ == "__main__":
    main()
