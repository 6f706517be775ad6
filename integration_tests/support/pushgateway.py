"""A recording HTTP server in a Prometheus push gateway's place (no gateway binary here).

It answers each ``PUT`` (what ``prometheus_client``'s ``push_to_gateway`` sends) with 200,
or with the status codes queued in ``answers`` first, and keeps every request.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Seconds wait_for() waits for pushes to arrive: a background push on a loaded machine.
ARRIVAL_TIMEOUT_S = 30.0
# Seconds to wait for the server thread after shutdown.
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Push:
    """One request the gateway received."""

    method: str
    path: str
    body: str


@dataclass
class RecordingGateway:
    """The pushes received so far (``url`` is the address to push to)."""

    url: str = ""
    pushes: list[Push] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)  # status codes to give first
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout_s: float = ARRIVAL_TIMEOUT_S) -> list[Push]:
        """Return the pushes once there are at least ``count`` (or the timeout passed)."""
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.pushes) >= count, timeout_s)
            return list(self.pushes)

    def received(self, push: Push) -> int:
        """Keep ``push`` and return the status to answer."""
        with self.arrived:
            self.pushes.append(push)
            self.arrived.notify_all()
            return self.answers.pop(0) if self.answers else 200


@contextlib.contextmanager
def recording_gateway() -> Iterator[RecordingGateway]:
    """Serve a :class:`RecordingGateway` on a loopback port for the block."""
    record = RecordingGateway()

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            status = record.received(Push(self.command, self.path, body))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="recording-gateway", daemon=True)
    thread.start()
    record.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield record
    finally:
        server.shutdown()
        server.server_close()
        thread.join(STOP_TIMEOUT_S)
