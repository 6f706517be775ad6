"""One node's listener: its server socket and the client connections it accepted.

A node stops by closing its listener: the port refuses new connections at once and every
open connection is aborted (clients see a reset), as when a broker process dies. It starts
again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from ._tls import TLS_HANDSHAKE_TIMEOUT_S

Serve = Callable[[int, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
# Seconds to wait for a closed listening socket to be released.
CLOSE_WAIT_S = 2.0


class NodeListener:
    """The listener of one node (see the module docstring)."""

    def __init__(self, node_id: int, host: str, port: int, serve: Serve) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self._serve = serve
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def running(self) -> bool:
        """Whether the port accepts connections."""
        return self._server is not None

    async def start(self, tls: ssl.SSLContext | None) -> None:
        """Listen on ``port`` (0 picks one; it is kept for the next start)."""
        self._server = await asyncio.start_server(
            self._on_client,
            self.host,
            self.port,
            reuse_address=True,
            ssl=tls,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls is not None else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the port and abort every connection (their requests are cancelled)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.drop_connections()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), CLOSE_WAIT_S)

    def drop_connections(self) -> None:
        """Abort every open connection (the port stays open)."""
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        try:
            await self._serve(self.node_id, reader, writer)
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
            if task is not None:
                self._tasks.discard(task)
