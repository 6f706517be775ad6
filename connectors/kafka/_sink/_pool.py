"""Per-process pool of write-task Kafka clients, reused across epochs.

Why: a fresh transactional producer costs an ``init_transactions`` (coordinator look-up
and InitProducerId) and a fresh marker consumer a coordinator look-up before its first
``committed()``; together most of an exactly-once epoch's fixed cost per task. Spark
reuses Python workers (``spark.python.worker.reuse``), so a worker that wrote partition
``p`` in epoch ``N`` can keep its clients for ``N + 1``.

Contract (:class:`ClientPool`; the process's one pool is :data:`POOL`):

1. :meth:`ClientPool.acquire` removes the entry of a key and hands it out as a
   :class:`Lease`: an entry is used by one participant at a time, never shared;
2. :meth:`Lease.release` with ``clean=True`` keeps the clients for the next lease of the
   key; only after the last transaction ended cleanly (committed, or aborted without
   error, or never begun) with no delivery error. ``clean=False`` drops the producer (a
   fenced or fatal producer is never used again) and keeps only the marker consumer;
3. the pool is tied to the process that filled it: after a fork it is empty (librdkafka
   handles are not fork-safe; inherited ones are never touched).

The pooled strategy's store (``_pooled``); whether an entry's *producer* may serve a given
task is decided by the reuse rules (``_reuse``), not here.

Keys name one transactional id, i.e. one partition on one producer lane (``_lanes``).

Spares: a worker also keeps, per transactional id of a sink it writes (its own lane), a *spare*
producer and marker consumer: created (``Producer(...)``, ``Consumer(...)``) but never
initialized. Creating a client fences nothing (only ``init_transactions`` does), so a spare
is just a new producer created earlier; a task whose pooled producer cannot serve takes
the spare and runs ``init_transactions`` on it with warm connections (a few ms instead of
tens to hundreds: librdkafka's coordinator-query timer, benchmarks/HISTORY.md). Spares are
filled in the background after a task (:meth:`ClientPool.fill_spares`), at most ``MAX_SPARES`` per process,
also for ids this worker has pooled clients of: when Spark hands the partition to the other
worker, that worker's ``init_transactions`` fences the pooled producer here, and the next
task of the id in this worker needs the spare (measured: 4-15 ms instead of 500 ms). Such a
spare has no consumer: the pooled marker consumer stays valid (nothing fences a consumer).

Prepared entries (:meth:`ClientPool.prepare`): after a task, a worker initializes in the
background, on its own lane, producers of partitions it did not write (``_prepare``
decides which and why it fences nobody); each becomes a pooled entry, and its
:class:`Prepared` record waits until a later task of the same client generation reports it
(:meth:`ClientPool.take_reports`). A lease of a key being prepared waits for the
preparation (at most ``PREPARE_WAIT_S``); a lease of a key drops its unreported record (the
task reports what serves it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer

from connectors.kafka._sink._lanes import LaneClaims
from connectors.kafka._sink._reuse import newer_instance_kept
from connectors.kafka._sink._strategy import Clients, close_consumer
from connectors.kafka._sink._writer import DeliveryErrors

log = logging.getLogger("connectors.kafka.sink.pool")

# Entries kept per process at most; beyond it the oldest is closed (bounds the
# connections of a worker that wrote many sinks or partitions over its life).
MAX_ENTRIES = 64
# Spare (uninitialized) client pairs kept per process at most: beyond a few ids the
# chance that this worker gets a given partition next is small anyway.
MAX_SPARES = 8
# Seconds a lease waits for a preparation of its key in flight (its init_transactions,
# a few ms with warm connections): never two initializations of one id in one process.
PREPARE_WAIT_S = 10.0
# Seconds after which a preparation round starts no further producer: it should end long
# before the worker's next epoch, and is an optimization only.
PREPARE_DEADLINE_S = 5.0
# Seconds a spare must have existed before a preparation initializes it: librdkafka drops
# the bootstrap connection after the first metadata answer, and an init_transactions
# before the broker's own connection is up waits for the 500 ms coordinator-query timer
# (a spare created 0.1 s earlier: 5 ms; benchmarks/HISTORY.md, sections 2.4 and 6.2).
SPARE_SETTLE_S = 0.1


@dataclass(kw_only=True)
class PoolEntry(Clients):
    """The clients of one transactional id in one process, between two tasks.

    ``producer`` is None when only the consumer is kept. ``token`` names the producer
    instance (minted by its ``init_transactions``; tasks report it, ``_reuse.ProducerNote``).
    ``generation`` is the driver's client generation the producer was last used under;
    ``serial`` the ticket under which the driver was last told of it (``_prepare``).
    """

    token: str = ""
    generation: str = ""
    serial: int = 0


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A prepared, not yet reported instance: what a task reports (``ProducerNote.prepared``)."""

    partition: int
    lane: int
    token: str
    generation: str
    serial: int


@dataclass(kw_only=True)
class Spare:
    """A producer (with its delivery callback) and a marker consumer, created, never initialized.

    ``consumer`` is None when the spare was made for an id whose marker consumer is pooled;
    ``created``: when (``time.monotonic``).
    """

    producer: Producer
    errors: DeliveryErrors
    consumer: Consumer | None
    created: float = field(default_factory=time.monotonic)


# A pool key: one transactional id with its marker group and settings (``_producers``).
Key = tuple[str, ...]
# Factory of a spare: ``with_consumer`` False when the id's marker consumer is pooled.
SpareFactory = Callable[[bool], Spare]
# Makes a prepared entry of a key from its spare (if any) and the key's pooled marker
# consumer (if any): initializes the producer; raising drops the preparation.
Preparer = Callable[["Spare | None", "Consumer | None"], tuple[PoolEntry, Prepared]]


def discard(entry: PoolEntry) -> None:
    """Release ``entry``'s clients (a producer's open transaction is left to the broker)."""
    close_consumer(entry.consumer)
    entry.consumer = None
    entry.producer = None


class Lease:
    """The clients of one pool key, held by one participant from acquire to release.

    ``clients`` holds what the participant uses: the pooled entry when there was one,
    else an empty entry it fills (``producer``, ``errors``, ``consumer``, ``committed``,
    ``generation``). ``pooled_producer`` says whether a pooled producer came with it.
    """

    def __init__(self, pool: ClientPool, key: Key, pooled: PoolEntry | None) -> None:
        self._pool = pool
        self.key = key
        self.pooled_producer = pooled is not None and pooled.producer is not None
        empty = PoolEntry(producer=None, errors=DeliveryErrors(), consumer=None)
        self.clients = pooled if pooled is not None else empty
        self._released = False

    def take_spare(self) -> Spare | None:
        """Remove and return the spare clients of this lease's key, or None."""
        return self._pool.take_spare(self.key)

    def release(self, *, clean: bool) -> None:
        """End the lease: keep the clients if ``clean``, else only the marker consumer.

        Idempotent. Nothing is kept when no client is left to keep.
        """
        if self._released:
            return
        self._released = True
        self._pool.end_lease(self.key)
        entry = self.clients
        if not clean:
            entry.producer = None
        if entry.producer is None and entry.consumer is None:
            return
        self._pool.give_back(self.key, entry)


class ClientPool:
    """Write-task clients of one process by pool key (see the module docstring)."""

    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        max_spares: int = MAX_SPARES,
        lanes: LaneClaims | None = None,
    ) -> None:
        self.lanes = lanes or LaneClaims()  # this worker's producer lanes (``_lanes``)
        self._max_entries = max_entries
        self._max_spares = max_spares
        self._lock = threading.Lock()
        self._entries: dict[Key, PoolEntry] = {}
        self._spares: dict[Key, Spare] = {}
        self._filling: set[Key] = set()
        self._preparing: dict[Key, threading.Event] = {}
        self._prepared: dict[Key, Prepared] = {}
        self._leased: dict[Key, int] = {}  # keys with a lease open (a count: tests nest)
        self._rounds: list[threading.Thread] = []  # preparation rounds started, not yet joined
        self._owner_pid = os.getpid()

    def _check_pid(self) -> None:
        """Forget entries inherited through fork (never close them: not fork-safe)."""
        pid = os.getpid()
        if pid != self._owner_pid:
            self._entries.clear()
            self._spares.clear()
            self._filling.clear()
            self._preparing.clear()
            self._prepared.clear()
            self._leased.clear()
            self._owner_pid = pid

    def acquire(self, key: Key) -> Lease:
        """Take the clients of ``key`` (if pooled) into a lease; release it when done.

        Waits for a preparation of ``key`` in flight (at most ``PREPARE_WAIT_S``); drops
        the key's unreported record (the task reports what serves it).
        """
        began = time.monotonic()
        deadline = began + PREPARE_WAIT_S
        waited = False
        while True:
            with self._lock:
                self._check_pid()
                busy = self._preparing.get(key)
                if busy is None or time.monotonic() >= deadline:
                    if waited:
                        ms = 1000 * (time.monotonic() - began)
                        log.debug("lease of %s waited %.0f ms for its preparation", key[0], ms)
                    self._leased[key] = self._leased.get(key, 0) + 1
                    self._prepared.pop(key, None)
                    return Lease(self, key, self._entries.pop(key, None))
            waited = True
            busy.wait(max(0.0, deadline - time.monotonic()))

    def end_lease(self, key: Key) -> None:
        """Note that a lease of ``key`` ended (called by :meth:`Lease.release`)."""
        with self._lock:
            left = self._leased.pop(key, 0) - 1
            if left > 0:
                self._leased[key] = left

    def take(self, key: Key) -> PoolEntry | None:
        """Remove and return the entry of ``key``, or None."""
        with self._lock:
            self._check_pid()
            return self._entries.pop(key, None)

    def token_of(self, key: Key) -> str | None:
        """Return the token of the producer pooled under ``key`` (None: no producer)."""
        with self._lock:
            self._check_pid()
            entry = self._entries.get(key)
            return entry.token if entry is not None and entry.producer is not None else None

    def give_back(self, key: Key, entry: PoolEntry) -> None:
        """Keep ``entry`` for the next lease of ``key`` (see the contract)."""
        with self._lock:
            self._check_pid()
            old = self._entries.pop(key, None)
            self._entries[key] = entry
            evicted = [] if old is None else [old]
            while len(self._entries) > self._max_entries:
                evicted.append(self._entries.pop(next(iter(self._entries))))
        for e in evicted:
            discard(e)

    def take_spare(self, key: Key) -> Spare | None:
        """Remove and return the spare clients of ``key``, or None."""
        with self._lock:
            self._check_pid()
            return self._spares.pop(key, None)

    def fill_spares(self, wanted: dict[Key, SpareFactory]) -> None:
        """Create, in a background thread, the spares of ``wanted`` this process lacks.

        ``wanted`` maps a pool key to a factory of its spare. Keys with a spare already are
        skipped (a pooled entry does not count: another worker may fence its producer; its
        spare then comes without a consumer); at most ``max_spares`` spares are kept.
        """
        with self._lock:
            self._check_pid()
            missing = [k for k in wanted if k not in self._spares and k not in self._filling]
            room = self._max_spares - len(self._spares) - len(self._filling)
            missing = missing[: max(0, room)]
            self._filling.update(missing)
            owner = self._owner_pid
            consumers = {
                k: k not in self._entries or self._entries[k].consumer is None for k in missing
            }
        if missing:
            threading.Thread(
                target=self._create,
                args=(missing, wanted, consumers, owner),
                name="kafka-sink-spares",
                daemon=True,
            ).start()

    def _create(
        self,
        keys: list[Key],
        wanted: dict[Key, SpareFactory],
        consumers: dict[Key, bool],
        owner: int,
    ) -> None:
        for key in keys:
            try:
                spare = wanted[key](consumers[key])
            except Exception:  # noqa: BLE001 - a spare is an optimization; a task makes its own
                spare = None
            with self._lock:
                self._filling.discard(key)
                if spare is not None and os.getpid() == owner == self._owner_pid:
                    self._spares[key] = spare

    def prepare(
        self, wanted: Sequence[tuple[Key, Preparer]], *, generation: str, serial: int
    ) -> None:
        """Prepare, in a background thread, an entry of each key of ``wanted`` (in order).

        A round under the ticket ``serial`` of client generation ``generation``. Skipped,
        when its turn comes: keys leased, being prepared, with an unreported record, or
        whose pooled producer of ``generation`` the driver was told of, or a round
        prepared, under that ticket or a later one (a round's keys are prepared one after
        another; an older round never replaces a newer instance). Each preparation takes
        the key's spare (initialized once ``SPARE_SETTLE_S`` old) and pooled entry (its
        consumer is kept, its producer replaced); one that fails gives the entry back as it
        was. None starts after ``PREPARE_DEADLINE_S``.
        """
        if wanted:
            round_ = threading.Thread(
                target=self._prepare,
                args=(list(wanted), (generation, serial), os.getpid()),
                name="kafka-sink-prepare",
                daemon=True,
            )
            with self._lock:
                self._rounds = [r for r in self._rounds if r.is_alive()] + [round_]
            round_.start()

    def wait_rounds(self, timeout_s: float) -> bool:
        """Wait until every preparation round started so far has ended; False on timeout.

        For tests that must not race a round (the event "this worker's preparations are
        done"); production code never waits for an optimization.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            rounds = list(self._rounds)
        for round_ in rounds:
            round_.join(max(0.0, deadline - time.monotonic()))
        return not any(r.is_alive() for r in rounds)

    def _prepare(
        self, jobs: list[tuple[Key, Preparer]], ticket: tuple[str, int], owner: int
    ) -> None:
        started = time.monotonic()
        deadline = started + PREPARE_DEADLINE_S
        for key, make in jobs:
            if time.monotonic() >= deadline:
                log.debug("preparation deadline passed: %s not prepared", key[0])
                return
            with self._lock:
                if owner != self._owner_pid or key in self._leased or key in self._preparing:
                    log.debug("%s not prepared: leased or in preparation", key[0])
                    continue
                if key in self._prepared or self._newer(key, ticket):
                    continue
                done = self._preparing[key] = threading.Event()
                spare = self._spares.pop(key, None)
                old = self._entries.pop(key, None)
            if spare is not None:  # a lease of the key waits meanwhile
                time.sleep(max(0.0, spare.created + SPARE_SETTLE_S - time.monotonic()))
            try:
                made: tuple[PoolEntry, Prepared] | None = make(
                    spare, None if old is None else old.consumer
                )
            except Exception:  # noqa: BLE001 - an optimization: the next task opens its own
                made = None
            log.debug(
                "%s %s %.0f ms after the round began",
                key[0],
                "prepared" if made is not None else "not prepared (failed)",
                1000 * (time.monotonic() - started),
            )
            with self._lock:
                self._preparing.pop(key, None)
                if owner == os.getpid() == self._owner_pid:
                    if made is not None:
                        self._entries[key], self._prepared[key] = made
                    elif old is not None:
                        self._entries[key] = old
            done.set()

    def _newer(self, key: Key, ticket: tuple[str, int]) -> bool:
        """Whether ``key``'s pooled producer is of ``ticket``'s generation and as new (lock held)."""
        entry = self._entries.get(key)
        if entry is None or entry.producer is None:
            return False
        generation, serial = ticket
        return newer_instance_kept(
            entry.generation, entry.serial, generation=generation, serial=serial
        )

    def take_reports(self, generation: str, serial: int) -> list[Prepared]:
        """Remove and return the unreported records of ``generation`` whose entry is pooled.

        The entries reported are marked as told to the driver under ticket ``serial``.
        """
        with self._lock:
            self._check_pid()
            mine = [k for k, r in self._prepared.items() if r.generation == generation]
            reports = []
            for key in mine:
                record = self._prepared.pop(key)
                entry = self._entries.get(key)
                if entry is not None and entry.producer is not None and entry.token == record.token:
                    entry.serial = serial
                    reports.append(record)
            return reports

    def size(self) -> int:
        """Return the number of pooled entries of this process (tests, diagnostics)."""
        with self._lock:
            self._check_pid()
            return len(self._entries)

    def spares(self) -> int:
        """Return the number of spare client pairs of this process (tests, diagnostics)."""
        with self._lock:
            self._check_pid()
            return len(self._spares)

    def clear(self) -> None:
        """Release every pooled entry and spare of this process."""
        with self._lock:
            self._check_pid()
            entries = list(self._entries.values())
            spare = list(self._spares.values())
            self._entries.clear()
            self._spares.clear()
            self._prepared.clear()
        for e in entries:
            discard(e)
        for s in spare:
            close_consumer(s.consumer)


# The pool of this process: Spark reuses Python workers, so the clients of one epoch's
# task serve the next task of the same worker. The only process-wide state of the sink.
POOL = ClientPool()
