"""Kafka as a ``txn`` participant: one transactional producer per write partition.

Kafka transactions cannot be completed from another process (librdkafka cannot resume
another instance's transaction), so ``completable_by_coordinator`` is False: each write
task commits its own transaction, and recovery redoes the missing part of an epoch,
skipping partitions whose marker says they committed (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from connectors.kafka import _clients
from connectors.kafka._classify import call_with_retry, classify, to_write_error
from connectors.kafka._sink import _pool
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._markers import encode_marker, marker_consumer, read_marker
from connectors.kafka._sink._writer import DeliveryErrors, Layout, RecordWriter
from connectors.stage import ArrowPartition, TaskInfo
from txn import EpochPlan, ErrorAction, Marker, Participant, Resource, RowSummary

log = logging.getLogger("connectors.kafka.participant")

# Seconds for init_transactions: it may wait for an older instance's transaction to
# be aborted by the broker, which takes a few round trips on a busy machine.
INIT_TIMEOUT_S = 60.0
# Seconds for commit/abort/send_offsets of one transaction (each is retried too).
TXN_CALL_TIMEOUT_S = 60.0
# Seconds a non-transactional close may wait for queued records to be delivered.
CLOSE_TIMEOUT_S = 5.0


class _State(str, enum.Enum):
    """Where a participant stands; the legal moves are in ``_MOVES``."""

    OPENED = "opened"  # clients ready, marker not read
    READY = "ready"  # marker read
    IN_TXN = "in-transaction"  # transaction begun (or, without transactions, epoch begun)
    WRITTEN = "written"  # rows produced
    PRE_COMMITTED = "pre-committed"  # flushed, marker staged
    DONE = "done"  # committed or aborted cleanly: the clients may be pooled
    FAILED_IN_TXN = "failed-in-transaction"  # a call failed with a transaction open
    FAILED = "failed"  # a call failed, no transaction open: the clients are never pooled
    DEAD = "dead"  # fenced or fatal: the producer is dropped, never called again


_S = _State
_MOVES: dict[_State, frozenset[_State]] = {
    _S.OPENED: frozenset({_S.READY}),
    _S.READY: frozenset({_S.IN_TXN, _S.DONE}),
    _S.IN_TXN: frozenset({_S.WRITTEN, _S.DONE}),
    _S.WRITTEN: frozenset({_S.PRE_COMMITTED, _S.DONE}),
    _S.PRE_COMMITTED: frozenset({_S.DONE}),
    _S.DONE: frozenset(),
    _S.FAILED_IN_TXN: frozenset({_S.FAILED, _S.DEAD}),
    _S.FAILED: frozenset(),
    _S.DEAD: frozenset(),
}
_TXN_OPEN = frozenset({_S.IN_TXN, _S.WRITTEN, _S.PRE_COMMITTED})


def new_producer(cfg: SinkConfig, transactional_id: str | None, errors: DeliveryErrors) -> Producer:
    """Return a producer with the sink's settings; only failed deliveries are reported."""
    settings: dict[str, object] = dict(cfg.producer_settings(transactional_id))
    settings["on_delivery"] = errors
    settings["delivery.report.only.error"] = True
    return _clients.producer(settings)


def init_transactions(producer: Producer, transactional_id: str) -> None:
    """Fence older instances of ``transactional_id`` and abort their open transaction."""
    call_with_retry(
        f"init_transactions({transactional_id})",
        lambda: producer.init_transactions(INIT_TIMEOUT_S),
    )


def plain_pool_key(cfg: SinkConfig) -> tuple[str, ...]:
    """Pool key of the non-transactional producer of a worker: every producer setting."""
    return ("plain", repr(sorted(cfg.producer_settings(None).items())))


def _spare_factory(cfg: SinkConfig, partition: int) -> Callable[[], _pool.Spare]:
    def make() -> _pool.Spare:
        errors = DeliveryErrors()
        producer = new_producer(cfg, cfg.transactional_id(partition), errors)
        consumer = marker_consumer(cfg.bootstrap_servers, cfg.marker_group(partition))
        return _pool.Spare(producer, errors, consumer)

    return make


def pool_key(cfg: SinkConfig, partition: int) -> tuple[str, ...]:
    """Pool key of a write task's clients: id, marker group and every producer setting."""
    txn_id = cfg.transactional_id(partition)
    settings = sorted(cfg.producer_settings(txn_id).items())
    return (txn_id, cfg.marker_group(partition), cfg.marker_topic, repr(settings))


class KafkaParticipant(Participant[ArrowPartition]):
    """Write partition ``partition`` of one epoch (contract: :class:`txn.Participant`).

    Opening (exactly-once): take this process's pooled clients of the transactional id
    (``_pool``) and ask the stage's :class:`~connectors.stage.ReuseTicket` whether the
    pooled producer may serve (it owns every rule); otherwise a new producer runs
    ``init_transactions`` (fencing every older instance and aborting their open
    transaction) and the marker is read after it. :meth:`close` returns the clients to
    the pool only when the transaction ended cleanly (state DONE).
    """

    def __init__(
        self, cfg: SinkConfig, layout: Layout, plan: EpochPlan, partition: int,
        *, task: TaskInfo | None = None,
    ) -> None:
        self._cfg = cfg
        self._plan = plan
        self._partition = partition
        self._task = task
        self._txn_id = cfg.transactional_id(partition) if cfg.transactional else None
        self._consumer: Consumer | None = None
        self._state = _S.OPENED
        self._committed: Marker | None = None  # the marker this producer committed last
        self._staged: Marker | None = None
        self._marker: Marker | None = None
        self.reused = False
        started = time.perf_counter()
        if self._txn_id is None:
            self._producer: Producer | None = self._open_plain()
            why = "no transactions"
        else:
            self._producer, why = self._open_transactional(self._txn_id)
        self.why_new = "" if self.reused else why  # diagnostics: why no pooled producer served
        log.debug(
            "epoch %d partition %d: %s in %.1f ms", plan.epoch, partition,
            "pooled producer" if self.reused else f"new producer ({why})",
            1000 * (time.perf_counter() - started),
        )
        self._writer = RecordWriter(self._producer, self._errors, layout, cfg.topic)

    # -- state ---------------------------------------------------------------------------
    def _move(self, to: _State) -> None:
        if to not in _MOVES[self._state]:
            msg = (
                f"partition {self._partition}: illegal participant step {self._state.value} -> "
                f"{to.value}; txn.run_partition calls the participant in contract order"
            )
            raise RuntimeError(msg)
        self._state = to

    @contextlib.contextmanager
    def _step(self, to: _State) -> Iterator[None]:
        """Run one contract step: on success move to ``to``; on an exception to FAILED."""
        try:
            yield
        except BaseException:
            if self._state is not _S.DEAD:
                self._state = _S.FAILED_IN_TXN if self._state in _TXN_OPEN else _S.FAILED
            raise
        self._move(to)

    def _live(self) -> Producer:
        if self._producer is None:
            msg = f"partition {self._partition}: the producer was dropped after a fatal error"
            raise RuntimeError(msg)
        return self._producer

    # -- opening -------------------------------------------------------------------------
    def _open_plain(self) -> Producer:
        """Open the idempotent producer of the non-transactional guarantees (pooled per worker).

        Nothing fences such a producer, so any task of the worker may use it after another.
        """
        entry = _pool.take(plain_pool_key(self._cfg))
        if entry is not None and entry.producer is not None:
            entry.errors.first, entry.errors.count = None, 0
            self._errors = entry.errors
            self.reused = True
            return entry.producer
        self._errors = DeliveryErrors()
        return new_producer(self._cfg, None, self._errors)

    def _open_transactional(self, txn_id: str) -> tuple[Producer, str]:
        cfg = self._cfg
        key = pool_key(cfg, self._partition)
        entry = _pool.take(key)
        self._consumer = entry.consumer if entry is not None else None
        spare = None
        if self._consumer is None:
            spare = _pool.take_spare(key)
            self._consumer = spare.consumer if spare is not None else marker_consumer(
                cfg.bootstrap_servers, cfg.marker_group(self._partition))
        try:
            return self._reuse_or_init(txn_id, entry, spare)
        except BaseException:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.close()
            self._consumer = None
            raise

    def _reuse_or_init(
        self, txn_id: str, entry: _pool.PoolEntry | None, spare: _pool.Spare | None
    ) -> tuple[Producer, str]:
        consumer = self._consumer
        assert consumer is not None  # noqa: S101 - set by the caller
        pooled = entry if entry is not None and entry.producer is not None else None
        if self._task is None:
            why = "no task binding (driver-side use)"
        else:
            decision = self._task.reuse.decide(
                self._task.task_attempt,
                pooled.generation if pooled is not None else None,
                pooled.committed if pooled is not None else None,
                lambda: read_marker(consumer, self._cfg.marker_topic),
            )
            if decision.reuse and pooled is not None and pooled.producer is not None:
                pooled.errors.first, pooled.errors.count = None, 0
                self._errors = pooled.errors
                self._committed = self._marker = decision.marker
                self.reused = True
                self._state = _S.READY
                return pooled.producer, decision.reason
            why = decision.reason
        if spare is None:
            spare = _pool.take_spare(pool_key(self._cfg, self._partition))
            if spare is not None:  # the pooled consumer serves; the spare's is not needed
                with contextlib.suppress(KafkaException, RuntimeError):
                    spare.consumer.close()
        if spare is not None:
            self._errors, producer = spare.errors, spare.producer
            why += "; a spare producer, created earlier"
        else:
            self._errors = DeliveryErrors()
            producer = new_producer(self._cfg, txn_id, self._errors)
        init_transactions(producer, txn_id)
        return producer, why

    # -- the contract --------------------------------------------------------------------
    def committed_marker(self) -> Marker | None:
        """Return the partition's marker (None in the non-transactional guarantees)."""
        if self._state is _S.READY:  # a reused producer's marker was read when deciding
            return self._marker
        with self._step(_S.READY):
            if self._consumer is not None:
                self._marker = read_marker(self._consumer, self._cfg.marker_topic)
                # Read after this instance's init: the baseline a later reuse compares with.
                self._committed = self._marker
        return self._marker

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        """Read the rows without writing (a replay that only compares with the marker)."""
        return rows.summary()

    def begin(self, epoch: int) -> None:
        """Begin the epoch's Kafka transaction (no-op without transactions)."""
        with self._step(_S.IN_TXN):
            if self._txn_id is not None:
                try:
                    self._live().begin_transaction()
                except KafkaException as exc:
                    raise to_write_error(exc, "begin_transaction") from exc

    def write(self, rows: ArrowPartition) -> RowSummary:
        """Produce every row once, summarizing on the way; a ``mid_write`` fault fires inside."""
        with self._step(_S.WRITTEN):
            faults = self._task.hooks if self._task is not None else None
            stop = faults.interrupt_write(self._plan.epoch, self._partition) if faults else None
            if stop is not None:
                self._writer.write(rows.batches(), stop_after=stop[0], on_stop=stop[1])
            else:
                self._writer.write(rows.batches())
            return rows.summary()

    def pre_commit(self, summary: RowSummary) -> None:
        """Flush (surfacing delivery errors) and stage the marker in the transaction."""
        with self._step(_S.PRE_COMMITTED):
            self._writer.flush(self._cfg.transaction_timeout_ms / 1000.0)
            if self._txn_id is None or self._consumer is None:
                return
            staged = Marker(self._plan.epoch, summary.rows, summary.checksum)
            offset, meta = encode_marker(staged)
            tp = TopicPartition(self._cfg.marker_topic, 0, offset, metadata=meta)
            group = self._consumer.consumer_group_metadata()
            producer = self._live()
            call_with_retry(
                "send_offsets_to_transaction",
                lambda: producer.send_offsets_to_transaction([tp], group, TXN_CALL_TIMEOUT_S),
            )
            self._staged = staged

    def commit(self) -> None:
        """Commit the transaction (retried while retriable; fenced raises)."""
        with self._step(_S.DONE):
            if self._txn_id is None:
                return
            producer = self._live()
            try:
                call_with_retry(
                    "commit_transaction", lambda: producer.commit_transaction(TXN_CALL_TIMEOUT_S)
                )
            except Exception as exc:
                if classify(exc) is ErrorAction.FATAL:
                    self._drop()
                raise
            self._committed = self._staged

    def abort(self) -> None:
        """Abort the open transaction, if any; a fenced producer is dropped instead.

        Idempotent. After a clean abort the clients may be pooled; after a failure never.
        """
        if self._state is _S.READY:  # nothing begun: a clean end
            self._move(_S.DONE)
            return
        if self._state not in _TXN_OPEN and self._state is not _S.FAILED_IN_TXN:
            return
        clean = self._state is not _S.FAILED_IN_TXN
        producer = self._producer
        if self._txn_id is not None and producer is not None:
            try:
                call_with_retry(
                    "abort_transaction", lambda: producer.abort_transaction(TXN_CALL_TIMEOUT_S)
                )
            except Exception:
                # A fenced or fatal producer cannot abort; the broker (or the next
                # init_transactions of this id) aborts its transaction. Never continue.
                self._drop()
                raise
        self._state = _S.DONE if clean else _S.FAILED

    def _drop(self) -> None:
        self._producer = None
        self._state = _S.DEAD

    def close(self) -> None:
        """Pool the clients if the transaction ended cleanly, else release them.

        Pooled only when exactly-once, state DONE and no delivery error. A producer with
        an open transaction is released without an abort: the next ``init_transactions``
        of its id aborts it.
        """
        if self._txn_id is not None and self._consumer is not None:
            clean = self._state is _S.DONE and self._errors.first is None
            if not clean:
                log.debug("epoch %d partition %d: producer not pooled (state %s, delivery "
                          "error %s)", self._plan.epoch, self._partition, self._state.value,
                          self._errors.first)
            entry = _pool.PoolEntry(
                self._producer if clean else None, self._errors, self._consumer,
                self._committed, self._task.reuse.generation if self._task else "",
            )
            _pool.give_back(pool_key(self._cfg, self._partition), entry)
            self._consumer = None
            self._producer = None
            _pool.fill_spares({pool_key(self._cfg, p): _spare_factory(self._cfg, p)
                               for p in range(self._plan.parallelism)})
            return
        if self._producer is not None and self._txn_id is None:
            # Non-transactional: nothing may be lost silently; flush what is queued.
            left = self._producer.flush(CLOSE_TIMEOUT_S)
            if left == 0 and self._state is _S.DONE and self._errors.first is None:
                entry = _pool.PoolEntry(self._producer, self._errors, None)
                _pool.give_back(plain_pool_key(self._cfg), entry)
        self._producer = None


@dataclass(frozen=True)
class KafkaResource(Resource[ArrowPartition]):
    """Driver-side, picklable description of the sink's Kafka side.

    ``task``: set in the write task by :meth:`for_task` (client reuse, fault hooks).
    """

    cfg: SinkConfig
    layout: Layout
    task: TaskInfo | None = None

    def for_task(self, task: TaskInfo) -> KafkaResource:
        """Return this resource bound to the write task ``task``."""
        return replace(self, task=task)

    def open(self, plan: EpochPlan, partition: int) -> KafkaParticipant:
        """Create or reuse the task's clients (see :class:`KafkaParticipant`)."""
        return KafkaParticipant(self.cfg, self.layout, plan, partition, task=self.task)

    def fingerprint(self) -> str:
        """Digest of the options that decide where rows land."""
        return self.cfg.fingerprint()

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Abort open transactions of ``{sink_id}-{p}`` for each ``p`` (start-up, shrink)."""
        if not self.cfg.transactional:
            return
        for p in partitions:
            txn_id = self.cfg.transactional_id(p)
            producer = new_producer(self.cfg, txn_id, DeliveryErrors())
            init_transactions(producer, txn_id)
            producer.flush(0)

