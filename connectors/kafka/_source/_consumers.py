"""Consumer reuse in a Python worker: a bounded cache of idle read_committed consumers.

Spark reuses its Python workers across tasks (``spark.python.worker.reuse``, on by
default), so a worker reads one micro-batch's range of a partition after another. Opening
a consumer per task costs TCP connections (and the handshakes of a secured listener) to
the bootstrap broker and the partition's leader, every batch, and its first fetch. The
cache keeps the consumer of a completed range for the next range of the same partition:

1. key: the client settings (address, every ``kafka.*`` option, the group id prefix) and
   the topic-partition, so two sources with different settings never share a consumer;
   the cache belongs to one process id, and a forked child sets its parent's consumers
   aside, never touching or closing them (librdkafka handles do not survive a fork);
2. a consumer is put back with the offsets a next range may start at to continue on it:
   from the range's end to the consumer's position. Its last poll may have returned
   records at or past the range's end (a range ending on transaction markers, whose
   records number fewer than its offsets): they are kept with it, and a read continuing
   on it takes those from its start on (``Lease.pending``) before anything it consumes;
   the offsets in between hold no other record (markers, aborted data);
3. a range that starts there continues on the consumer, with the records it fetched
   while idle (an idle consumer keeps fetching, up to librdkafka's local queue bound,
   ``queued.max.messages.kbytes``); a range starting elsewhere (a replayed batch), a
   consumer whose position moved while idle, and a read that raised or was abandoned
   invalidate it: it is closed and the read gets a new one, as Spark's cache invalidates
   a failed task's consumer.
   (Re-positioning a consumer, or pausing and resuming it, costs librdkafka about 0.2 s
   before it delivers again, more than a new consumer on a local broker: measured);
4. at most ``kafkaConsumer.cache.capacity`` idle consumers stay, the least recently used
   closed first, and none idle longer than :data:`IDLE_TIMEOUT_S`; capacity ``0`` is the
   reference path: a consumer per read task, closed at its end, as before the cache;
5. a read task never waits for a consumer to close: every close runs on a daemon thread of
   its own. librdkafka's close of a consumer whose cluster went away while it sat idle
   can spin without end (seen: ``rd_kafka_consumer_close`` busy for ten minutes after the
   broker behind its address was replaced), and the task that happened to evict it would
   hang with it. At exit :func:`close_idle` waits at most :data:`EXIT_CLOSE_WAIT_S`.

:func:`stats` counts the consumers created and reused in this process (benchmarks, tests).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from ._options import SourceOptions
from ._ranges import OffsetRange

_log = logging.getLogger(__name__)

Key = tuple[Any, ...]

IDLE_TIMEOUT_S = 300.0
# Seconds the process's exit waits for its idle consumers to close (item 5): a clean close
# takes milliseconds; one that cannot finish must not keep a Python worker from exiting.
EXIT_CLOSE_WAIT_S = 5.0
"""Seconds an idle consumer is kept at most (Spark's consumer cache timeout, 5 minutes): a
partition no longer read stops holding its connections and fetched records."""


@dataclass(frozen=True)
class ConsumerStats:
    """Consumers this process created and reused (cache hits), and the idle ones it holds."""

    created: int
    reused: int
    idle: int


@dataclass(kw_only=True)
class _Idle:
    consumer: Any
    position: int  # the consumer's position when put back
    low: int  # a range starting in [low, position] continues on it
    pending: list[Any]  # records the consumer returned from ``low`` on (ascending)
    since: float  # monotonic time it was put back

    def continues(self, start: int) -> bool:
        """Whether a range starting at ``start`` continues on this consumer."""
        return self.low <= start <= self.position


class Lease:
    """A consumer assigned at a range's start, for one read; give it back with :meth:`end`.

    ``pending``: records the consumer returned before, from the range's start on; the read
    takes them before anything it consumes.
    """

    def __init__(
        self, cache: _Cache, key: Key, consumer: Any, capacity: int, pending: list[Any]
    ) -> None:
        self.consumer = consumer
        self.pending = pending
        self._cache = cache
        self._key = key
        self._capacity = capacity

    def end(self, rng: OffsetRange, *, complete: bool, overflow: list[Any]) -> None:
        """After the read of ``rng``: keep the consumer if it completed, else close it.

        ``overflow``: the records at or past ``rng.end`` the consumer returned (ascending).
        """
        position = position_of(self.consumer, rng) if complete else None
        if position is None or self._capacity <= 0:
            _close(self.consumer)
            return
        idle = _Idle(
            consumer=self.consumer,
            position=position,
            low=min(rng.end, position),
            pending=overflow,
            since=time.monotonic(),
        )
        self._cache.give_back(self._key, idle, self._capacity)


class _Cache:
    """Idle consumers of this process by key, least recently used first (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._idle: OrderedDict[Key, _Idle] = OrderedDict()
        self._inherited: list[_Idle] = []  # a parent process's consumers: never touched
        self.created = 0
        self.reused = 0

    def take(self, key: Key, rng: OffsetRange, new: Callable[[], Any]) -> tuple[Any, list[Any]]:
        """Return a consumer of ``key`` at ``rng.start`` (a cached one, or ``new()``), pending."""
        with self._lock:
            expired = self._expire()
            idle = self._idle.pop(key, None)
        _close_all(expired)
        if idle is not None and idle.continues(rng.start):
            if position_of(idle.consumer, rng) == idle.position:
                with self._lock:
                    self.reused += 1
                return idle.consumer, [m for m in idle.pending if m.offset() >= rng.start]
            _log.debug("kafka-rc: cached consumer of %s moved while idle; closing it", rng)
        if idle is not None:
            _close(idle.consumer)
        consumer = new()
        with self._lock:
            self.created += 1
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        return consumer, []

    def give_back(self, key: Key, idle: _Idle, capacity: int) -> None:
        with self._lock:
            evicted = self._expire()
            replaced = self._idle.pop(key, None)
            if replaced is not None:
                evicted.append(replaced)
            self._idle[key] = idle
            while len(self._idle) > capacity:
                evicted.append(self._idle.popitem(last=False)[1])
        _close_all(evicted)

    def _expire(self) -> list[_Idle]:
        """Remove what a fork or :data:`IDLE_TIMEOUT_S` ended (lock held); return the latter."""
        self._after_fork()
        old = time.monotonic() - IDLE_TIMEOUT_S
        expired = [key for key, idle in self._idle.items() if idle.since < old]
        return [self._idle.pop(key) for key in expired]

    def close_idle(self, wait_s: float | None = None) -> None:
        with self._lock:
            self._after_fork()
            idle = list(self._idle.values())
            self._idle.clear()
        _close_all(idle)
        if wait_s is not None:
            wait_for_closes(wait_s)

    def stats(self) -> ConsumerStats:
        with self._lock:
            return ConsumerStats(self.created, self.reused, len(self._idle))

    def _after_fork(self) -> None:
        """In a forked child: set the parent's consumers aside (lock held)."""
        pid = os.getpid()
        if pid != self._pid:
            self._inherited.extend(self._idle.values())
            self._idle.clear()
            self._pid, self.created, self.reused = pid, 0, 0


_CACHE = _Cache()


def lease(options: SourceOptions, rng: OffsetRange, new: Callable[[], Any]) -> Lease:
    """Return a consumer for ``rng`` (at its start) from the cache, or ``new()`` assigned."""
    key: Key = (
        options.bootstrap_servers,
        options.kafka_config,
        options.group_id_prefix,
        rng.topic,
        rng.partition,
    )
    consumer, pending = _CACHE.take(key, rng, new)
    return Lease(_CACHE, key, consumer, options.consumer_cache_capacity, pending)


def stats() -> ConsumerStats:
    """Consumers created and reused by this process's read tasks so far, and idle ones now."""
    return _CACHE.stats()


def close_idle(wait_s: float | None = None) -> None:
    """Close every idle consumer of this process (at exit; between benchmark phases).

    The close runs on a thread of its own (module docstring, item 5); ``wait_s``: wait for
    it at most that long (None: do not wait).
    """
    _CACHE.close_idle(wait_s)


atexit.register(close_idle, EXIT_CLOSE_WAIT_S)


def position_of(consumer: Any, rng: OffsetRange) -> int | None:
    """Return the consumer's position in ``rng``'s partition; None while it has none."""
    try:
        (tp,) = consumer.position([TopicPartition(rng.topic, rng.partition)])
    except Exception:  # noqa: BLE001 - a consumer in a state of its own: not reusable
        return None
    return int(tp.offset) if tp.offset >= 0 else None


def _close_all(idle: list[_Idle]) -> None:
    """Close the consumers of ``idle`` on a daemon thread (item 5)."""
    _close_in_background([entry.consumer for entry in idle])


def _close(consumer: Any) -> None:
    """Close ``consumer`` on a daemon thread (item 5)."""
    _close_in_background([consumer])


# The close threads started and not yet seen ended (item 5).
_CLOSERS: list[threading.Thread] = []
_CLOSERS_LOCK = threading.Lock()


def _close_in_background(consumers: list[Any]) -> None:
    if not consumers:
        return
    closer = threading.Thread(
        target=_close_now, args=(consumers,), name="kafka-rc-consumer-close", daemon=True
    )
    with _CLOSERS_LOCK:
        _CLOSERS[:] = [t for t in _CLOSERS if t.is_alive()]
        _CLOSERS.append(closer)
    closer.start()


def wait_for_closes(wait_s: float) -> bool:
    """Wait at most ``wait_s`` for every close started so far to end; True if they all did."""
    deadline = time.monotonic() + wait_s
    with _CLOSERS_LOCK:
        closers = list(_CLOSERS)
    for closer in closers:
        closer.join(max(0.0, deadline - time.monotonic()))
    return not any(closer.is_alive() for closer in closers)


def _close_now(consumers: list[Any]) -> None:
    for consumer in consumers:
        _close_one(consumer)


def _close_one(consumer: Any) -> None:
    try:
        consumer.close()
    except Exception as exc:  # noqa: BLE001 - closing a consumer that failed already
        _log.debug("kafka-rc: closing a consumer failed: %s", exc)
