"""``MetricsServer``: the collector's metrics over HTTP on the driver, for Prometheus to scrape."""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from prometheus_client import start_http_server

from connectors.prometheus._errors import MetricsConfigError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from connectors.prometheus._collector import PrometheusCollector

log = logging.getLogger("connectors.prometheus")

# Prometheus's convention for an exporter: every interface, so a scraper on another host
# reaches the driver; pass host="127.0.0.1" to keep the endpoint local.
DEFAULT_HOST = "0.0.0.0"  # noqa: S104 - an exporter is meant to be scraped from elsewhere
# Seconds stop() waits for the server thread after shutting it down: a scrape in progress
# finishes well within this; the thread is a daemon, so a stuck one never blocks the exit.
STOP_TIMEOUT_S = 5.0


class MetricsServer:
    """An HTTP endpoint serving ``collector``'s registry (any path, e.g. ``/metrics``).

    ``port=0`` binds an ephemeral port; :attr:`port` is the bound one once started.
    :meth:`start` and :meth:`stop` may be called again (a stopped server starts on a new
    socket); a ``with`` block starts and stops it. Only the collector's own registry is
    served, not the process-wide default one.
    """

    def __init__(
        self, collector: PrometheusCollector, port: int = 0, host: str = DEFAULT_HOST
    ) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            msg = f"port must be an integer in 0..65535 (0: an ephemeral port), got {port!r}"
            raise MetricsConfigError(msg)
        if not isinstance(host, str) or not host:
            msg = f"host must be a non-empty address to bind, got {host!r}"
            raise MetricsConfigError(msg)
        self._collector = collector
        self._host = host
        self._requested = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        """The bound port while running, else the configured one (0: ephemeral)."""
        server = self._server
        return int(server.server_port) if server is not None else self._requested

    @property
    def running(self) -> bool:
        """Whether the endpoint is serving."""
        return self._server is not None

    def start(self) -> MetricsServer:
        """Bind and serve in a daemon thread (a no-op while running); returns ``self``.

        Raises:
            OSError: the address cannot be bound (the port is taken, the host is not local).

        """
        with self._lock:
            if self._server is None:
                server, thread = start_http_server(
                    self._requested, addr=self._host, registry=self._collector.registry
                )
                self._server, self._thread = server, thread
                log.info("Prometheus metrics on %s:%d", self._host, server.server_port)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (a no-op when not running)."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
