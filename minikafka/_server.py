"""Asyncio TCP server: framing, dispatch, fault hooks, background timers.

Per connection, requests are handled one at a time in arrival order, as Kafka does
(responses must come back in request order).

Bad input never takes the broker down:
1. a frame larger than ``max_request_bytes`` or with a negative size closes the
   connection (logged);
2. an unknown API key, or an unsupported version of anything but ApiVersions, closes
   the connection (logged); ApiVersions answers UNSUPPORTED_VERSION with the
   supported list, as Kafka does;
3. a body that does not decode closes the connection (logged);
4. a handler bug is logged with its traceback and answered UNKNOWN_SERVER_ERROR.

On a secured listener (:class:`ListenerSecurity`), the TLS handshake comes first
(:mod:`minikafka._tls`) and, on a SASL listener, every frame goes through the
connection's :class:`SaslSession` until it has authenticated (:mod:`minikafka._sasl`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ._broker import Broker
from ._errors import ProtocolError
from ._faults import Faults
from ._handlers import API_TABLE, RequestContext
from ._handlers.admin import supported_versions
from ._protocol import (
    API_VERSIONS_KEY,
    build_response,
    encode_response,
    parse_request,
    peek_key_version,
    prewarm,
)
from ._sasl import Credentials, SaslAnswer, SaslSession
from ._security import ListenerSecurity
from ._stats import STATS_API_KEY, encode_stats_response, stats_reset_requested
from ._tls import TLS_HANDSHAKE_TIMEOUT_S, server_context

log = logging.getLogger("minikafka.server")
# How often group sessions and rebalance deadlines are checked (seconds).
GROUP_TICK_S = 0.05
# Poll interval while the broker is paused by a fault hook (seconds).
PAUSE_POLL_S = 0.01


class KafkaServer:
    """Serves one :class:`Broker` on a TCP port."""

    def __init__(
        self,
        broker: Broker,
        faults: Faults,
        host: str,
        port: int,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.broker = broker
        self.faults = faults
        self.host = host
        self.port = port
        self.security = security or ListenerSecurity()
        self._credentials: Credentials | None = None
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._conn_tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        """Open the broker state and start listening."""
        prewarm({k: (s.max_version, s.max_version) for k, s in API_TABLE.items()})
        tls = server_context(self.security)
        if self.security.uses_sasl:
            self._credentials = Credentials(self.security)
        self.broker.open()
        self._server = await asyncio.start_server(
            self._on_client,
            self.host,
            self.port,
            reuse_address=True,
            ssl=tls,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls is not None else None,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self.broker.host, self.broker.port = self.host, self.port
        loop = asyncio.get_running_loop()

        def drop_from_any_thread() -> None:
            loop.call_soon_threadsafe(self.drop_connections)

        self.faults.set_dropper(drop_from_any_thread)
        cfg = self.broker.config
        txn_interval = cfg.transaction_abort_check_interval_ms / 1000
        offsets_interval = cfg.offsets_retention_check_interval_ms / 1000
        self._tasks = [
            asyncio.create_task(self._every(txn_interval, self.broker.txns.expire)),
            asyncio.create_task(self._every(GROUP_TICK_S, self.broker.groups.tick)),
            asyncio.create_task(self._every(offsets_interval, self.broker.groups.expire_offsets)),
        ]
        log.info("listening on %s:%d (%s)", self.host, self.port, self.security.protocol)

    async def stop(self) -> None:
        """Stop listening, close connections and files."""
        self.faults.set_dropper(None)
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        self.drop_connections()
        for task in list(self._conn_tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, *self._conn_tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        self.broker.close()

    def drop_connections(self) -> None:
        """Close every client connection."""
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _every(self, seconds: float, fn: Any) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                fn()
            except Exception:
                log.exception("background task %s failed", getattr(fn, "__name__", fn))

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conn_tasks.add(task)
        self._writers.add(writer)
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else "unknown"
        try:
            await self._serve(reader, writer, host)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # client went away
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
            if task is not None:
                self._conn_tasks.discard(task)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
    ) -> None:
        limit = self.broker.config.max_request_bytes
        credentials = self._credentials
        sasl = SaslSession(credentials, host) if credentials is not None else None
        while True:
            size = int.from_bytes(await reader.readexactly(4), "big", signed=True)
            if size < 0 or size > limit:
                msg = f"request frame of {size} bytes outside 0..{limit} (max_request_bytes)"
                raise ProtocolError(msg)
            frame = await reader.readexactly(size)
            if sasl is not None and not sasl.authenticated:
                while self.faults.paused:  # a paused broker does not authenticate either
                    await asyncio.sleep(PAUSE_POLL_S)
                answer = self._sasl_gate(sasl, frame)
                if answer is not None:
                    if answer.delay_s:
                        await asyncio.sleep(answer.delay_s)
                    if answer.response is not None:
                        writer.write(answer.response)
                        await writer.drain()
                    if answer.close:
                        return
                    continue
            response = await self._dispatch(frame, host)
            if response is not None:
                writer.write(response)
                await writer.drain()

    def _sasl_gate(self, sasl: SaslSession, frame: bytes) -> SaslAnswer | None:
        """Let the connection's SASL session consume a frame; count what it answered."""
        try:
            answer = sasl.receive(frame)
        except ProtocolError:
            self.broker.requests.reject()
            raise
        if answer is not None and answer.api_key is not None:
            self.broker.requests.count(answer.api_key)
        return answer

    async def _dispatch(self, frame: bytes, host: str) -> bytes | None:
        requests = self.broker.requests
        try:
            key, version, corr = peek_key_version(frame)
        except ProtocolError:
            requests.reject()
            raise
        if key == STATS_API_KEY:
            return self._stats_answer(frame, corr)
        spec = API_TABLE.get(key)
        if spec is None:
            requests.reject()
            msg = f"unsupported API key {key}"
            raise ProtocolError(msg)
        if not spec.min_version <= version <= spec.max_version:
            requests.reject()
            if key == API_VERSIONS_KEY:
                log.info("ApiVersions v%d unsupported; answering with v0", version)
                resp = build_response(
                    key,
                    0,
                    {
                        "error_code": ErrorCode.unsupported_version,
                        "api_keys": supported_versions(),
                    },
                )
                return encode_response(key, corr, resp)
            msg = f"unsupported version {version} of {spec.name} (supported {spec.min_version}.."
            msg += f"{spec.max_version})"
            raise ProtocolError(msg)
        try:
            header, req = parse_request(frame, key, version)
        except ProtocolError:
            requests.reject()
            raise
        requests.count(key)
        code, delay = self.faults.take(key)
        while self.faults.paused:
            await asyncio.sleep(PAUSE_POLL_S)
        if delay:
            await asyncio.sleep(delay)
        ctx = RequestContext(self.broker, key, version, header.client_id, host)
        if code is not None:
            log.info("fault hook: answering %s with error %d", spec.name, code)
            data: dict[str, Any] | None = spec.error_response(req, ErrorCode(code))
            if key == 0 and req.acks == 0:
                data = None
        else:
            try:
                result = spec.handler(ctx, req)
                data = await result if inspect.isawaitable(result) else result
            except Exception:
                log.exception("%s v%d handler failed", spec.name, version)
                data = spec.error_response(req, ErrorCode.unknown_server_error)
        if data is None:
            return None
        return encode_response(key, corr, build_response(key, version, data))

    def _stats_answer(self, frame: bytes, corr: int) -> bytes:
        """Answer a request-count read-out (see :mod:`minikafka._stats`)."""
        counts = self.broker.requests.snapshot()
        if stats_reset_requested(frame):
            self.broker.requests.reset()
        return encode_stats_response(corr, counts)
