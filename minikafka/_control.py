"""Node faults: the operations, and the control channel that carries them between processes.

One operation type, :class:`NodeOp`, reaches a running cluster three ways:

1. in-process: ``EmbeddedKafka.faults.stop_node(1)`` (the server runs it on its loop);
2. from another process: ``BrokerProcess.stop_node(1)``, over the broker's control port;
3. from a shell: ``python -m minikafka control HOST:PORT stop 1`` (:func:`control_main`).

The control port (``--control-port``) is a plain-TCP line protocol on the broker's host,
separate from the Kafka listeners, so it answers whatever their security and whichever
nodes are stopped: one JSON object per line each way, the operation's fields in, the
answer (``{"ok": true, ...}`` or ``{"error": "..."}``) out. It authenticates nobody: it is
a test broker's switchboard, bound to the broker's host (127.0.0.1 by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from ._cluster import COORDINATOR_KINDS
from ._errors import MiniKafkaError

log = logging.getLogger("minikafka.control")
ACTIONS = ("stop", "start", "move-leader", "move-coordinator", "end-loading", "status")
# Seconds a control client waits for the broker's answer (a stop or start of a node
# closes or opens a listener: well under a second on an idle machine).
CONTROL_TIMEOUT_S = 30.0
# Longest line the control port reads (bytes): an operation is a small JSON object.
MAX_CONTROL_LINE = 64 * 1024


class NodeOpError(MiniKafkaError):
    """A node operation names something that does not exist or cannot be done now."""


_FIELD_TYPES: dict[object, type] = {"str": str, "int": int, "bool": bool}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOp:
    """One node fault or query.

    Attributes:
        action: "stop", "start", "move-leader", "move-coordinator", "end-loading" or
            "status".
        node: the node stopped, started or done loading, or the new leader (not for
            "status").
        clean: for "stop": move leaderships away first (Kafka's controlled shutdown)
            instead of a hard stop (connections reset, port refuses, leaderships stay
            until the failure is detected after ``node_failure_detection_ms``).
        topic, partition: for "move-leader": the partition whose leader moves.
        coordinator, key: for "move-coordinator": "group" or "transaction", and the
            group or transactional id whose coordinator moves.
        load_ms: for "move-coordinator": how long the new coordinator answers
            COORDINATOR_LOAD_IN_PROGRESS (-1: the broker's ``coordinator_load_ms``).

    """

    action: str
    node: int = -1
    clean: bool = False
    topic: str = ""
    partition: int = 0
    coordinator: str = ""
    key: str = ""
    load_ms: int = -1

    def __post_init__(self) -> None:
        for f in fields(self):
            value, kind = getattr(self, f.name), _FIELD_TYPES[f.type]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                msg = f"NodeOp.{f.name} must be {kind.__name__}, got {value!r}"
                raise NodeOpError(msg)
        if self.action not in ACTIONS:
            msg = f"unknown node operation {self.action!r}; use one of {ACTIONS}"
            raise NodeOpError(msg)
        if self.action != "status" and self.node < 0:
            msg = f"node operation {self.action!r} needs a node id >= 0, got {self.node}"
            raise NodeOpError(msg)
        if self.action == "move-leader" and not self.topic:
            msg = "move-leader needs a topic"
            raise NodeOpError(msg)
        if self.action == "move-coordinator" and self.coordinator not in COORDINATOR_KINDS:
            msg = f"move-coordinator needs coordinator 'group' or 'transaction', got {self.coordinator!r}"
            raise NodeOpError(msg)

    def to_json(self) -> str:
        """One line of the control protocol."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str | bytes) -> NodeOp:
        """Inverse of :meth:`to_json`; NodeOpError for anything else."""
        try:
            data = json.loads(line)
        except ValueError as exc:
            msg = f"control line is not JSON: {exc}"
            raise NodeOpError(msg) from None
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or not set(data) <= known or "action" not in data:
            msg = f"control line must be a JSON object with 'action' and fields of {sorted(known)}"
            raise NodeOpError(msg)
        try:
            return cls(**data)
        except TypeError as exc:
            raise NodeOpError(str(exc)) from None


Answer = dict[str, Any]


class NodeFaults(ABC):
    """The node faults every way in has (``Faults``, ``BrokerProcess``): one method each."""

    @abstractmethod
    def _run_node_op(self, op: NodeOp) -> Answer:
        """Run one operation on the cluster and return its answer (NodeOpError if refused)."""

    def stop_node(self, node: int, *, clean: bool = False) -> None:
        """Stop a node: hard (connections reset, port refuses) or clean (leaderships move first).

        Stopping a stopped node does nothing.
        """
        self._run_node_op(NodeOp(action="stop", node=node, clean=clean))

    def start_node(self, node: int) -> None:
        """Start a stopped node again on its port (starting a running node does nothing)."""
        self._run_node_op(NodeOp(action="start", node=node))

    def move_leader(self, topic: str, partition: int, node: int) -> None:
        """Make ``node`` (a running replica) the leader of one partition."""
        self._run_node_op(NodeOp(action="move-leader", node=node, topic=topic, partition=partition))

    def move_coordinator(
        self, coordinator: str, key: str, node: int, *, load_s: float | None = None
    ) -> None:
        """Move the group (``"group"``) or transaction (``"transaction"``) coordinator of ``key``.

        The leader of the internal partition holding ``key`` moves to ``node`` (so does every
        id that shares that partition); it answers COORDINATOR_LOAD_IN_PROGRESS for
        ``load_s`` seconds (None: the broker's ``coordinator_load_ms``).
        """
        load_ms = -1 if load_s is None else round(load_s * 1000)
        op = NodeOp(
            action="move-coordinator", node=node, coordinator=coordinator, key=key, load_ms=load_ms
        )
        self._run_node_op(op)

    def end_loading(self, node: int) -> None:
        """End ``node``'s topic loading now, as if ``topic_load_delay_ms`` had passed.

        Until the node's next start; a node not loading stays as it is. For tests that wait
        for the end of loading as an event rather than for a time.
        """
        self._run_node_op(NodeOp(action="end-loading", node=node))

    def node_status(self) -> dict[int, str]:
        """Each node's state: "running", "stopped" (not yet detected) or "down"."""
        answer = self._run_node_op(NodeOp(action="status"))
        return {int(node): str(state) for node, state in answer["nodes"].items()}


# ---- the control port ----------------------------------------------------------------
Apply = Callable[[NodeOp], Awaitable[Answer]]


async def serve_control(host: str, port: int, apply: Apply) -> asyncio.Server:
    """Listen for control lines on ``host:port`` and answer each with ``apply``'s result."""

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write(json.dumps(await _answer(line, apply)).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(on_client, host, port, limit=MAX_CONTROL_LINE)


async def _answer(line: bytes, apply: Apply) -> Answer:
    try:
        op = NodeOp.from_json(line)
        answer = await apply(op)
    except NodeOpError as exc:
        return {"error": str(exc)}
    log.info("control: %s", op.to_json())
    return {"ok": True, **answer}


def node_control(address: str, op: NodeOp) -> Answer:
    """Send one operation to a broker's control port (``host:port``); return the answer.

    Raises NodeOpError with the broker's message when it refuses the operation, and
    OSError when nothing answers there.
    """
    host, _, port = address.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), CONTROL_TIMEOUT_S) as sock:
        sock.sendall(op.to_json().encode() + b"\n")
        with sock.makefile("rb") as stream:
            line = stream.readline(MAX_CONTROL_LINE)
    if not line:
        msg = f"the control port {address} closed without answering"
        raise ConnectionError(msg)
    answer: Answer = json.loads(line)
    if "error" in answer:
        raise NodeOpError(str(answer["error"]))
    return answer


def control_main(argv: list[str]) -> int:
    """``python -m minikafka control HOST:PORT ACTION ...``: print the answer; exit 1 if refused."""
    p = argparse.ArgumentParser(
        prog="python -m minikafka control",
        description="Stop, start or move nodes of a running minikafka (its --control-port).",
    )
    p.add_argument("address", help="HOST:PORT of the broker's control port")
    sub = p.add_subparsers(dest="action", required=True)
    stop = sub.add_parser("stop", help="stop a node (hard unless --clean)")
    stop.add_argument("node", type=int)
    stop.add_argument("--clean", action="store_true", help="move its leaderships first")
    sub.add_parser("start", help="start a stopped node").add_argument("node", type=int)
    move = sub.add_parser("move-leader", help="move a partition's leader")
    move.add_argument("topic")
    move.add_argument("partition", type=int)
    move.add_argument("node", type=int)
    coord = sub.add_parser("move-coordinator", help="move a group or transaction coordinator")
    coord.add_argument("coordinator", choices=sorted(COORDINATOR_KINDS))
    coord.add_argument("key", help="group id or transactional id")
    coord.add_argument("node", type=int)
    coord.add_argument(
        "--load-ms", type=int, default=-1, help="COORDINATOR_LOAD_IN_PROGRESS for this long"
    )
    sub.add_parser("end-loading", help="end a node's topic loading now").add_argument(
        "node", type=int
    )
    sub.add_parser("status", help="print each node's state")
    args = vars(p.parse_args(argv))
    address = args.pop("address")
    try:
        answer = node_control(address, NodeOp(**args))
    except (NodeOpError, OSError) as exc:
        sys.stderr.write(f"python -m minikafka control: {exc}\n")
        return 1
    sys.stdout.write(json.dumps(answer, sort_keys=True) + "\n")
    return 0
