"""Per-process pool of write-task Kafka clients, reused across epochs.

Why: a fresh transactional producer costs an ``init_transactions`` (coordinator look-up
and InitProducerId) and a fresh marker consumer a coordinator look-up before its first
``committed()``; together most of an exactly-once epoch's fixed cost per task. Spark
reuses Python workers (``spark.python.worker.reuse``), so a worker that wrote partition
``p`` in epoch ``N`` can keep its clients for ``N + 1``.

Contract:

1. :func:`take` removes and returns the entry of ``key`` (or None): an entry is used by
   one participant at a time, never shared;
2. :func:`give_back` returns an entry after its last transaction ended cleanly
   (committed, or aborted without error, or never begun) with no delivery error;
   anything else must be :func:`discard`-ed (a fenced or fatal producer is never used
   again);
3. the pool is tied to the process that filled it: after a fork it is empty (librdkafka
   handles are not fork-safe; inherited ones are never touched).

Whether an entry's *producer* may be reused for a given epoch is decided by the stage's
reuse rules (``connectors.stage``'s ``ReuseTicket``), not here.

Spares: a worker also keeps, per transactional id of a sink it writes, a *spare*
producer and marker consumer: created (``Producer(...)``, ``Consumer(...)``) but never
initialized. Creating a client fences nothing (only ``init_transactions`` does), so a spare
is just a new producer created earlier; a task whose pooled producer cannot serve takes
the spare and runs ``init_transactions`` on it with warm connections (a few ms instead of
tens to hundreds: librdkafka's coordinator-query timer, docs/perf-notes.md). Spares are
filled in the background after a task (``fill_spares``), at most ``MAX_SPARES`` per process.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer

from connectors.kafka._sink._writer import DeliveryErrors
from txn import Marker

# Entries kept per process at most; beyond it the oldest is closed (bounds the
# connections of a worker that wrote many sinks or partitions over its life).
MAX_ENTRIES = 64
# Spare (uninitialized) client pairs kept per process at most: beyond a few ids the
# chance that this worker gets a given partition next is small anyway.
MAX_SPARES = 8


@dataclass
class PoolEntry:
    """The clients of one transactional id in one process, between two epochs.

    ``producer`` is None when only the consumer is kept. ``committed`` is the marker
    this entry's producer committed last, or read right after its ``init_transactions``
    (None: no marker). ``generation`` is the driver's client generation the producer
    was last used under (see ``KafkaSink``).
    """

    producer: Producer | None
    errors: DeliveryErrors
    consumer: Consumer | None
    committed: Marker | None = None
    generation: str = ""


@dataclass
class Spare:
    """A producer (with its delivery callback) and a marker consumer, created, never initialized."""

    producer: Producer
    errors: DeliveryErrors
    consumer: Consumer


_lock = threading.Lock()
_entries: dict[tuple[str, ...], PoolEntry] = {}
_spares: dict[tuple[str, ...], Spare] = {}
_filling: set[tuple[str, ...]] = set()
_owner_pid = os.getpid()


def _check_pid() -> None:
    """Forget entries inherited through fork (never close them: not fork-safe)."""
    global _owner_pid  # process-wide pool
    pid = os.getpid()
    if pid != _owner_pid:
        _entries.clear()
        _spares.clear()
        _filling.clear()
        _owner_pid = pid


def take_spare(key: tuple[str, ...]) -> Spare | None:
    """Remove and return the spare clients of ``key``, or None."""
    with _lock:
        _check_pid()
        return _spares.pop(key, None)


def fill_spares(wanted: dict[tuple[str, ...], Callable[[], Spare]]) -> None:
    """Create, in a background thread, the spares of ``wanted`` this process lacks.

    ``wanted`` maps a pool key to a factory of its spare. Keys with a pooled entry or a
    spare already are skipped; at most ``MAX_SPARES`` spares are kept.
    """
    with _lock:
        _check_pid()
        missing = [k for k in wanted
                   if k not in _entries and k not in _spares and k not in _filling]
        missing = missing[: max(0, MAX_SPARES - len(_spares) - len(_filling))]
        _filling.update(missing)
    if not missing:
        return

    def create() -> None:
        for key in missing:
            try:
                spare = wanted[key]()
            except Exception:  # noqa: BLE001 - a spare is an optimization; a task makes its own
                spare = None
            with _lock:
                _filling.discard(key)
                if spare is not None and os.getpid() == _owner_pid:
                    _spares[key] = spare

    threading.Thread(target=create, name="kafka-sink-spares", daemon=True).start()


def take(key: tuple[str, ...]) -> PoolEntry | None:
    """Remove and return the entry of ``key``, or None."""
    with _lock:
        _check_pid()
        return _entries.pop(key, None)


def give_back(key: tuple[str, ...], entry: PoolEntry) -> None:
    """Keep ``entry`` for the next participant of ``key`` (see the contract)."""
    with _lock:
        _check_pid()
        old = _entries.pop(key, None)
        _entries[key] = entry
        evicted = [] if old is None else [old]
        while len(_entries) > MAX_ENTRIES:
            evicted.append(_entries.pop(next(iter(_entries))))
    for e in evicted:
        discard(e)


def discard(entry: PoolEntry) -> None:
    """Release ``entry``'s clients (a producer's open transaction is left to the broker)."""
    if entry.consumer is not None:
        with contextlib.suppress(KafkaException, RuntimeError):
            entry.consumer.close()
    entry.consumer = None
    entry.producer = None


def size() -> int:
    """Return the number of pooled entries of this process (tests, diagnostics)."""
    with _lock:
        _check_pid()
        return len(_entries)


def spares() -> int:
    """Return the number of spare client pairs of this process (tests, diagnostics)."""
    with _lock:
        _check_pid()
        return len(_spares)


def clear() -> None:
    """Release every pooled entry and spare of this process."""
    with _lock:
        _check_pid()
        entries = list(_entries.values())
        spare = list(_spares.values())
        _entries.clear()
        _spares.clear()
    for e in entries:
        discard(e)
    for s in spare:
        with contextlib.suppress(KafkaException, RuntimeError):
            s.consumer.close()
