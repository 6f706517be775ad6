"""Fault hooks for chaos tests: injected errors, delays, dropped connections, pauses, nodes.

Every method is thread-safe: tests call them from the test thread while the broker
runs in its own thread (EmbeddedKafka). The node faults (``stop_node``, ``start_node``,
``move_leader``, ``move_coordinator``, ``node_status``; :class:`minikafka._control.NodeFaults`)
run on the broker's loop and return when they are done.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ._control import Answer, NodeFaults, NodeOp
from ._errors import BrokerStartError


class ApiKey(enum.IntEnum):
    """Kafka API keys the broker implements (names as in the Kafka protocol guide)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    LIST_TRANSACTIONS = 66


def resolve_api(api: ApiKey | str | int) -> ApiKey:
    """Accept an ApiKey, its name ("END_TXN", "EndTxn", "end_txn") or its number."""
    if isinstance(api, ApiKey):
        return api
    if isinstance(api, int):
        return ApiKey(api)
    norm = api.replace("_", "").replace("-", "").upper()
    for member in ApiKey:
        if member.name.replace("_", "") == norm:
            return member
    msg = f"unknown API {api!r}; use a minikafka._faults.ApiKey member or one of its names"
    raise ValueError(msg)


@dataclass
class _Pending:
    errors: dict[ApiKey, list[int]] = field(default_factory=dict)
    delays: dict[ApiKey, list[float]] = field(default_factory=dict)


class Faults(NodeFaults):
    """Fault hooks of one broker (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = _Pending()
        self._paused = False
        self._dropper: Callable[[], None] | None = None
        self._node_runner: Callable[[NodeOp], Answer] | None = None

    def _run_node_op(self, op: NodeOp) -> Answer:
        with self._lock:
            runner = self._node_runner
        if runner is None:
            msg = "the broker is not running: start it before stopping or moving nodes"
            raise BrokerStartError(msg)
        return runner(op)

    def fail_next(self, api: ApiKey | str | int, n: int, error_code: int) -> None:
        """Answer the next ``n`` requests of ``api`` with ``error_code`` (nothing applied).

        ``error_code`` is a Kafka error code: an int, a kio ErrorCode, or a
        confluent_kafka.KafkaError constant such as KafkaError.NOT_COORDINATOR.
        """
        code = int(getattr(error_code, "value", error_code))
        ErrorCode(code)  # validate: raises ValueError for a code Kafka does not define
        with self._lock:
            self._pending.errors.setdefault(resolve_api(api), []).extend([code] * n)

    def delay_next(self, api: ApiKey | str | int, n: int, seconds: float) -> None:
        """Hold the next ``n`` requests of ``api`` for ``seconds`` before handling them."""
        if seconds < 0:
            msg = f"delay must be >= 0 seconds, got {seconds}"
            raise ValueError(msg)
        with self._lock:
            self._pending.delays.setdefault(resolve_api(api), []).extend([seconds] * n)

    def drop_connections(self) -> None:
        """Close every client connection now (clients see a disconnect and reconnect)."""
        with self._lock:
            dropper = self._dropper
        if dropper is not None:
            dropper()

    def pause(self) -> None:
        """Stop answering requests (connections stay open) until :meth:`resume`."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        """Answer requests again after :meth:`pause`."""
        with self._lock:
            self._paused = False

    def clear(self) -> None:
        """Forget pending injected errors and delays, and resume."""
        with self._lock:
            self._pending = _Pending()
            self._paused = False

    # ---- broker side ------------------------------------------------------------
    @property
    def paused(self) -> bool:
        """Whether the broker is paused."""
        with self._lock:
            return self._paused

    def set_dropper(self, dropper: Callable[[], None] | None) -> None:
        """Server hook: how to drop every connection (thread-safe callable)."""
        with self._lock:
            self._dropper = dropper

    def set_node_runner(self, runner: Callable[[NodeOp], Answer] | None) -> None:
        """Server hook: how to run a node operation on the broker's loop (thread-safe)."""
        with self._lock:
            self._node_runner = runner

    def take(self, api_key: int) -> tuple[int | None, float]:
        """Consume the injected (error code, delay) for one request of ``api_key``."""
        try:
            key = ApiKey(api_key)
        except ValueError:
            return None, 0.0
        with self._lock:
            errors = self._pending.errors.get(key)
            code = errors.pop(0) if errors else None
            delays = self._pending.delays.get(key)
            delay = delays.pop(0) if delays else 0.0
        return code, delay
