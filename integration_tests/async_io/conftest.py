"""A real HTTP enrichment service on 127.0.0.1 for the async I/O integration tests.

Behaviour is chosen per request by query parameters, so tests sharing the server do
not interfere (each test uses its own ``ns``):

    GET /enrich?ns=N&key=K[&delay_ms=D][&fail_first=F][&fail=1][&fail_once=1][&hold=1]

with ``hold=1`` never answers (the request hangs until the server stops, so the client's
timeout is certain to fire), else sleeps D ms, answers 503 for the first F hits of (N, K), 500 always when ``fail=1``,
500 only for the first hit of (N, K) when ``fail_once=1`` (a non-retriable failure
that a replay gets past), else 200 with JSON
``{"key": K, "score": 3*K+1, "hit": <hits of (N, K) so far>}``.

    GET /bulk?ns=N&keys=K1,K2,...[&delay_ms=D]

answers ``{"scores": [3*K1+1, ...]}`` (one hit counted per key).
The server counts hits per (ns, key) and the peak number of requests it served at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

# Seconds a held request waits before giving up: only bounds a server thread that nobody
# cancels; the server stopping ends every hold first.
HOLD_BOUND_S = 120.0


@dataclass
class ServiceState:
    lock: threading.Lock = field(default_factory=threading.Lock)
    hits: Counter[tuple[str, int]] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)
    stopped: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        ns = query.get("ns", "")
        keys = [int(k) for k in query.get("keys", query.get("key", "")).split(",")]
        state = self.server.state
        with state.lock:
            for key in keys:
                state.hits[(ns, key)] += 1
            hit = state.hits[(ns, keys[0])]
            state.in_flight[ns] += 1
            state.peak[ns] = max(state.peak[ns], state.in_flight[ns])
        try:
            if query.get("hold") == "1":
                state.stopped.wait(HOLD_BOUND_S)
                return
            time.sleep(float(query.get("delay_ms", "0")) / 1000.0)
        finally:
            with state.lock:
                state.in_flight[ns] -= 1
        if url.path == "/bulk":
            self._reply(200, {"scores": [3 * k + 1 for k in keys]})
        elif query.get("fail") == "1":
            self._reply(500, {"error": "broken key"})
        elif query.get("fail_once") == "1" and hit == 1:
            self._reply(500, {"error": "first attempt fails"})
        elif hit <= int(query.get("fail_first", "0")):
            self._reply(503, {"error": "try again"})
        else:
            self._reply(200, {"key": keys[0], "score": 3 * keys[0] + 1, "hit": hit})

    def _reply(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout or cancellation): expected in some tests


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    state: ServiceState


@dataclass
class Service:
    port: int
    state: ServiceState


@pytest.fixture(scope="module")
def http_service() -> Iterator[Service]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.state = ServiceState()
    thread = threading.Thread(target=server.serve_forever, name="enrich-service", daemon=True)
    thread.start()
    try:
        yield Service(server.server_address[1], server.state)
    finally:
        server.state.stopped.set()
        server.shutdown()
        server.server_close()
