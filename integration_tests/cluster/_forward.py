"""A port-forwarding "firewall" for the driver: only the ports Spark is told about pass.

Many clusters reach the driver through a firewall or NAT that opens just the ports set in
``spark.driver.port`` and ``spark.driver.blockManager.port``. :class:`PortForward` plays
that role on loopback: the driver binds 127.0.0.1 (``spark.driver.bindAddress``) and
advertises 127.0.0.2 (``spark.driver.host``); this forwarder listens on 127.0.0.2 on the
listed ports only and pipes each connection to 127.0.0.1. Any other driver port (such as
the sink's vote server) is unreachable at the advertised address: connection refused.
"""

from __future__ import annotations

import contextlib
import socket
import threading

# Bytes read per chunk while piping.
CHUNK_BYTES = 64 * 1024
# Seconds between checks for close() in the accept loops.
ACCEPT_POLL_S = 0.5


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(CHUNK_BYTES):
            dst.sendall(chunk)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


class PortForward:
    """Forward ``listen_host:p`` to ``target_host:p`` for every ``p`` in ``ports``."""

    def __init__(self, listen_host: str, target_host: str, ports: list[int]) -> None:
        self._target = target_host
        self._closed = threading.Event()
        self._listeners = []
        for port in ports:
            sock = socket.create_server((listen_host, port))
            sock.settimeout(ACCEPT_POLL_S)
            self._listeners.append(sock)
        for sock in self._listeners:
            threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        port = listener.getsockname()[1]
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection((self._target, port))
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        for sock in self._listeners:
            sock.close()

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
