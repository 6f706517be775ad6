"""A sink object's hold on its epoch log: released when closed, handed to a successor.

A sink keeps its epoch log open between calls, and with it the log's lock (the PostgreSQL
session's advisory lock, the file log's ``flock``) or its fencing client (Kafka), plus
its vote server and its connectors' driver clients. It lets go of them
(:class:`SinkResources`) when it is closed (``close()``, the end of a ``with`` block,
``stop_gracefully``) and when the object is collected (``weakref.finalize``).
But a stopped query's sink object often lives on (a notebook keeps it; Spark's gateway may
keep the ``foreachBatch`` function), so a new sink object of the same ``sink_id`` in the
same process (a notebook cell run again) registers here before it opens the log
(:func:`take_over`), and:

1. the previous object, if idle (not inside a call) and its streaming query no longer
   runs in this process (or it never ran in one, or the new object writes that same
   query, restarted from its checkpoint), closes its log: the new one takes over (the
   previous one would reopen it at its next call, taking it back the same way);
2. while the previous object's query is still active (or it is inside a call), the new
   one is refused with :class:`StageCode.SINK_IN_USE`, which names the query and what to do.

Objects are told apart by ``sink_id`` and connector kind (:func:`owner_key`). Sinks in
other processes are not seen here: their log's lock refuses (or fences) as before.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from connectors.stage._connector import SinkConnector
from connectors.stage._errors import StageCode, StageError
from connectors.stage._metrics import CountingLog
from connectors.stage._votes import VoteServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_log = logging.getLogger("connectors.stage")

OwnerKey = tuple[str, str]
_Sink = TypeVar("_Sink", bound="SinkLifecycle")


class LogOwner(Protocol):
    """A sink object as the registry sees it."""

    @property
    def sink_id(self) -> str:
        """The sink's identity."""

    def release_for_successor(self, query_id: str | None) -> str | None:
        """Close the epoch log for a new object writing ``query_id``; or say why not."""


@dataclass(kw_only=True)
class SinkResources:
    """What a sink object holds open on the driver.

    Its epoch log, its vote server, and (through its connectors) clients such as the
    PostgreSQL coordinator's connection.
    """

    key: OwnerKey
    connectors: tuple[SinkConnector, ...]
    log: CountingLog | None = None
    votes: VoteServer | None = None

    def close(self) -> None:
        """Stop the vote server and close the log (releasing its lock). Idempotent."""
        votes, self.votes = self.votes, None
        log, self.log = self.log, None
        if votes is not None:
            votes.close()
        if log is not None:
            log.close()

    def close_connectors(self) -> None:
        """Close the connectors' driver-side clients (no sink object of the key holds the log)."""
        for connector in self.connectors:
            connector.close()

    def collected(self) -> None:
        """Close everything a collected sink object held.

        The connectors' clients too, unless another sink object of the same key holds
        the log now (it shares them).
        """
        self.close()
        if leave(self.key, None):
            self.close_connectors()


@dataclass(frozen=True)
class RunningQuery:
    """The streaming query a sink object last wrote a batch of, and whether it still runs."""

    query_id: str
    session: SparkSession  # the batch's (classic: it shares the SparkContext's state)

    def active(self) -> bool | None:
        """Whether the query is active in this process (None: Spark would not say)."""
        try:
            sc = self.session.sparkContext
        except (AttributeError, NotImplementedError):  # Spark Connect: no SparkContext
            return None
        if getattr(sc, "_jsc", None) is None:
            return False  # the SparkContext was stopped, and every query with it
        jvm = sc._jvm  # noqa: SLF001
        if jvm is None:
            return None  # no gateway to ask
        try:
            # py4j: no public API sees the queries of every session (a batch's session is a
            # clone with a query manager of its own), the SparkContext's shared state does.
            key = jvm.java.util.UUID.fromString(self.query_id)
            shared = self.session._jsparkSession.sharedState()  # noqa: SLF001
            return bool(shared.activeStreamingQueries().containsKey(key))
        except Exception:  # noqa: BLE001 - py4j raises Py4JError subtypes for a missing method
            return None

    def why_busy(self, successor: str | None) -> str | None:
        """Say why the query's sink must not be taken over by one writing ``successor``.

        None: it may. The same query id is never active twice at once, so a successor
        writing this very query (restarted from its checkpoint) means this run ended.
        """
        if successor == self.query_id:
            return None
        active = self.active()
        if active is False:
            return None
        if active is None:
            return (
                f"Spark did not say whether its query {self.query_id} still runs; if it "
                "stopped, call close() on that sink object"
            )
        return f"its query {self.query_id} is still active"


_OWNERS: dict[OwnerKey, weakref.ref[Any]] = {}
# Reentrant: a sink object collected while the lock is held (the collector may run at any
# allocation) leaves the registry from its finalizer in the same thread.
_OWNERS_LOCK = threading.RLock()


def owner_key(kind: str, sink_id: str) -> OwnerKey:
    """Return the key of a sink's epoch log: the connector kind and the sink id."""
    return (kind, sink_id)


def take_over(key: OwnerKey, owner: LogOwner, query_id: str | None) -> None:
    """Register ``owner``, writing ``query_id``, as the holder of ``key``'s log.

    Steps 1-2 of the module docstring.

    Raises:
        StageCode.SINK_IN_USE: the previous holder's query still runs (or it is inside a call).

    """
    with _OWNERS_LOCK:
        ref = _OWNERS.get(key)
        previous = ref() if ref is not None else None
        if previous is not None and previous is not owner:
            busy = previous.release_for_successor(query_id)
            if busy is not None:
                msg = (
                    f"sink {owner.sink_id!r}: another sink object of this process holds its "
                    f"epoch log, and {busy}. Stop that query first (query.stop(), or "
                    "sink.stop_gracefully(query)), then start this one; or give this query "
                    "another sink_id"
                )
                raise StageError(msg, code=StageCode.SINK_IN_USE)
            _log.info(
                "sink %s: took the epoch log over from a stopped sink object of this process",
                owner.sink_id,
            )
        _OWNERS[key] = weakref.ref(owner)


def leave(key: OwnerKey, owner: LogOwner | None) -> bool:
    """Forget ``owner`` (None: a collected one) as the holder of ``key``'s log.

    Returns whether no live sink object holds the log now (its shared clients may close).
    """
    with _OWNERS_LOCK:
        ref = _OWNERS.get(key)
        holder = ref() if ref is not None else None
        if ref is not None and holder in (owner, None):
            del _OWNERS[key]
            return True
        return holder is None


class SinkLifecycle:
    """The lifecycle part of :class:`~connectors.stage.TransactionalSink` (module docstring).

    The subclass sets ``_sink_id``, ``_lock`` (held while a batch is written) and
    ``_recovered``, and calls :meth:`_init_lifecycle` when its runtime state is created.
    """

    _sink_id: str
    _members: tuple[Any, ...]  # each with its ``connector``
    _lock: threading.Lock
    _recovered: bool
    _res: SinkResources
    _query: RunningQuery | None

    @property
    def sink_id(self) -> str:
        """The sink's identity (its epoch log's)."""
        return self._sink_id

    def _init_lifecycle(self) -> None:
        connectors = tuple(m.connector for m in self._members)
        self._res = SinkResources(key=self._owner_key, connectors=connectors)
        self._query = None  # the streaming query of the last batch written
        weakref.finalize(self, self._res.collected)  # release the log, its lock, the clients

    @property
    def _owner_key(self) -> OwnerKey:
        return owner_key(type(self._members[0].connector).__qualname__, self._sink_id)

    def close(self, *, wait: bool = True) -> bool:
        """Release the epoch log (and its lock), the vote server and the connectors' clients.

        Idempotent. A later call opens them again (and recovers), unless the sink was
        stopped. Clients shared with another sink object of the same id that took the log
        over are left to that object. ``wait=False``: only if no batch is being written
        right now (else nothing is closed). Returns whether it closed.
        """
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            self._close_locked()
        finally:
            self._lock.release()
        if leave(self._owner_key, self):
            self._res.close_connectors()
        return True

    def _close_locked(self) -> None:
        self._res.close()
        self._recovered = False
        self._query = None

    def release_for_successor(self, query_id: str | None) -> str | None:
        """Close the log for a new sink object writing ``query_id``; or say why not."""
        if not self._lock.acquire(blocking=False):
            return "it is writing a batch right now"
        try:
            busy = self._query.why_busy(query_id) if self._query is not None else None
            if busy is None:
                self._close_locked()
            return busy
        finally:
            self._lock.release()

    def __enter__(self: _Sink) -> _Sink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
