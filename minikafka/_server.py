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

Each node has its own listener (:mod:`minikafka._listeners`); a request is handled as the
node it reached: a coordinator request that node cannot serve gets Kafka's answer before its
handler runs (:func:`minikafka._handlers._base.coordinator_answer`), a partition it does not
lead gets NOT_LEADER_OR_FOLLOWER in the handler. Node faults run here (:meth:`KafkaServer.apply`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import ssl
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from ._broker import Broker
from ._cluster import COORDINATOR_KINDS
from ._control import Answer, NodeOp, NodeOpError
from ._errors import BrokerConfigError, ProtocolError
from ._faults import Faults
from ._handlers import API_TABLE, Connection, RequestContext
from ._handlers._base import coordinator_answer
from ._handlers.admin import supported_versions
from ._listeners import NodeListener
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
from ._tls import server_context

log = logging.getLogger("minikafka.server")
# How often group sessions and rebalance deadlines are checked (seconds).
GROUP_TICK_S = 0.05
# Poll interval while the broker is paused by a fault hook (seconds).
PAUSE_POLL_S = 0.01
# Seconds a node operation from another thread may take (closing or opening a listener).
NODE_OP_TIMEOUT_S = 30.0


class KafkaServer:
    """Serves one :class:`Broker` on one port per node (docs/minikafka.md, "Several nodes")."""

    def __init__(
        self,
        broker: Broker,
        faults: Faults,
        host: str,
        ports: Sequence[int] | int = 0,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.broker = broker
        self.faults = faults
        self.host = host
        self.security = security or ListenerSecurity()
        ids = broker.config.node_ids
        wanted = [ports] if isinstance(ports, int) else list(ports)
        if len(wanted) not in (1, len(ids)):
            msg = f"{len(wanted)} ports for {len(ids)} nodes: give one port or one per node"
            raise BrokerConfigError(msg)
        wanted += [0] * (len(ids) - len(wanted))
        self.listeners = {
            node: NodeListener(node, host, port, self._on_client)
            for node, port in zip(ids, wanted, strict=True)
        }
        self._credentials: Credentials | None = None
        self._tls: ssl.SSLContext | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._fence_timers: dict[int, asyncio.TimerHandle] = {}

    @property
    def ports(self) -> list[int]:
        """Each node's port, in node id order."""
        return [listener.port for listener in self.listeners.values()]

    async def start(self) -> None:
        """Open the broker state and start every node's listener."""
        prewarm({k: (s.max_version, s.max_version) for k, s in API_TABLE.items()})
        self._tls = server_context(self.security)
        if self.security.uses_sasl:
            self._credentials = Credentials(self.security)
        self.broker.open()
        self.broker.host = self.host
        for node, listener in self.listeners.items():
            await listener.start(self._tls)
            self.broker.ports[node] = listener.port
        loop = asyncio.get_running_loop()

        def drop_from_any_thread() -> None:
            loop.call_soon_threadsafe(self.drop_connections)

        def run_from_any_thread(op: NodeOp) -> Answer:
            future = asyncio.run_coroutine_threadsafe(self.apply(op), loop)
            return future.result(NODE_OP_TIMEOUT_S)

        self.faults.set_dropper(drop_from_any_thread)
        self.faults.set_node_runner(run_from_any_thread)
        cfg = self.broker.config
        txn_interval = cfg.transaction_abort_check_interval_ms / 1000
        offsets_interval = cfg.offsets_retention_check_interval_ms / 1000
        self._tasks = [
            asyncio.create_task(self._every(txn_interval, self.broker.txns.expire)),
            asyncio.create_task(self._every(GROUP_TICK_S, self.broker.groups.tick)),
            asyncio.create_task(self._every(offsets_interval, self.broker.groups.expire_offsets)),
        ]
        log.info("listening on %s ports %s (%s)", self.host, self.ports, self.security.protocol)

    async def stop(self) -> None:
        """Stop listening, close connections and files."""
        self.faults.set_dropper(None)
        self.faults.set_node_runner(None)
        for timer in self._fence_timers.values():
            timer.cancel()
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for listener in self.listeners.values():
            await listener.stop()
        self.broker.close()

    def drop_connections(self) -> None:
        """Close every client connection of every node."""
        for listener in self.listeners.values():
            listener.drop_connections()

    # ---- node faults ----------------------------------------------------------------
    async def apply(self, op: NodeOp) -> Answer:
        """Run one node operation (:class:`minikafka._control.NodeOp`) on the loop thread.

        Raises NodeOpError for a node, topic or partition that does not exist, or a move
        the cluster refuses (docs/minikafka.md, "Node faults").
        """
        if op.action == "status":
            return {"nodes": self._node_states()}
        listener = self.listeners.get(op.node)
        if listener is None:
            msg = f"no node {op.node}; nodes are {list(self.listeners)}"
            raise NodeOpError(msg)
        if op.action == "stop":
            await self._stop_node(listener, clean=op.clean)
        elif op.action == "end-loading":
            self.broker.end_loading(op.node)
        elif op.action == "start":
            await self._start_node(listener)
        else:
            self._move(op)
        return {}

    def _node_states(self) -> dict[str, str]:
        nodes = self.broker.nodes
        return {
            str(n): "running" if nodes.running(n) else "stopped" if nodes.listed(n) else "down"
            for n in nodes.ids
        }

    async def _stop_node(self, listener: NodeListener, *, clean: bool) -> None:
        if not listener.running:
            return
        node, cluster = listener.node_id, self.broker.cluster
        cluster.stop(node, clean=clean)
        await listener.stop()
        delay_s = self.broker.config.node_failure_detection_ms / 1000
        if clean or delay_s <= 0:
            cluster.fence(node)
        else:
            loop = asyncio.get_running_loop()
            self._fence_timers[node] = loop.call_later(delay_s, cluster.fence, node)
        log.info("node %d stopped (%s)", node, "clean" if clean else "hard")

    async def _start_node(self, listener: NodeListener) -> None:
        if listener.running:
            return
        node = listener.node_id
        timer = self._fence_timers.pop(node, None)
        if timer is not None:
            timer.cancel()
        await listener.start(self._tls)
        self.broker.cluster.start(node)
        self.broker.notify_data()
        log.info("node %d started on port %d", node, listener.port)

    def _move(self, op: NodeOp) -> None:
        cluster = self.broker.cluster
        if op.action == "move-leader":
            topic = self.broker.topics.get(op.topic)
            if topic is None or not 0 <= op.partition < len(topic.leaders):
                msg = f"no partition {op.topic}-{op.partition}"
                raise NodeOpError(msg)
            leadership, load_s = topic.leaders[op.partition], None
        else:
            leadership = cluster.coordinator(COORDINATOR_KINDS[op.coordinator], op.key)
            load_s = None if op.load_ms < 0 else op.load_ms / 1000
        try:
            cluster.move_leader(leadership, op.node, load_s=load_s)
        except ValueError as exc:
            raise NodeOpError(str(exc)) from None
        self.broker.notify_data()  # long-polling fetches on the old leader answer now

    async def _every(self, seconds: float, fn: Any) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                fn()
            except Exception:
                log.exception("background task %s failed", getattr(fn, "__name__", fn))

    async def _on_client(
        self, node: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) else "unknown"
        try:
            await self._serve(reader, writer, host, node)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # client went away
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, node: int
    ) -> None:
        limit = self.broker.config.max_request_bytes
        connection = Connection()
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
            response = await self._dispatch(frame, host, node, connection)
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

    async def _dispatch(
        self, frame: bytes, host: str, node: int, connection: Connection
    ) -> bytes | None:
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
        ctx = RequestContext(
            broker=self.broker,
            api_key=key,
            version=version,
            client_id=header.client_id,
            client_host=host,
            node_id=node,
            connection=connection,
        )
        if code is not None:
            log.info("fault hook: answering %s with error %d", spec.name, code)
        else:
            routed = coordinator_answer(ctx, req)
            code = None if routed is None else int(routed)
        if code is not None:
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
