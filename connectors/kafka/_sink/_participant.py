"""Kafka as a ``txn`` participant: one producer per write partition.

Kafka transactions cannot be completed from another process (librdkafka cannot resume
another instance's transaction), so ``completable_by_coordinator`` is False: each write
task commits its own transaction, and recovery redoes the missing part of an epoch,
skipping partitions whose marker says they committed (docs/architecture.md).

Two participants, chosen by the guarantee (:meth:`KafkaResource.open`):
:class:`TransactionalKafkaParticipant` (exactly-once) and :class:`PlainKafkaParticipant`
(at-least-once, at-most-once). Both take their clients from the process's client pool
(``_pool``) as a lease and release it in ``close``: clean only in state DONE.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

from confluent_kafka import KafkaException, Producer, TopicPartition

from connectors.kafka import _classify
from connectors.kafka._classify import call_with_retry, classify, to_write_error
from connectors.kafka._sink import _pool
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._markers import encode_marker, marker_consumer, read_marker
from connectors.kafka._sink._producers import (
    fill_spares,
    init_transactions,
    new_producer,
    plain_pool_key,
    pool_key,
)
from connectors.kafka._sink._writer import DeliveryErrors, RecordLayout, RecordWriter
from connectors.stage import ArrowPartition, TaskInfo
from connectors.stage._retry import step_budget
from connectors.stage._states import ParticipantState, ParticipantStateMachine
from txn import EpochPlan, ErrorAction, Marker, Participant, Resource, RowSummary

log = logging.getLogger("connectors.kafka.participant")

# Seconds for commit/abort/send_offsets of one transaction (each is retried too).
TXN_CALL_TIMEOUT_S = 60.0
# Seconds a non-transactional close may wait for queued records to be delivered.
CLOSE_TIMEOUT_S = 5.0

_S = ParticipantState
_MOVES = {
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


def _budget() -> contextlib.AbstractContextManager[None]:
    """One time budget for the retried Kafka calls of one epoch step (a broker restart)."""
    return step_budget(_classify.BROKER_RESTART_WAIT_S)


def _failed(start: ParticipantState) -> ParticipantState:
    """Return the state after a failed step that began in ``start``."""
    return _S.FAILED_IN_TXN if start in _TXN_OPEN else _S.FAILED


class KafkaParticipant(Participant[ArrowPartition]):
    """Write partition ``partition`` of one epoch (contract: :class:`txn.Participant`).

    The part both guarantees share: the lease of pooled clients, the states, the writer.
    ``reused`` and ``why_new`` say whether a pooled producer served (diagnostics).
    """

    def __init__(
        self,
        cfg: SinkConfig,
        layout: RecordLayout,
        plan: EpochPlan,
        partition: int,
        *,
        task: TaskInfo | None = None,
        pool: _pool.ClientPool = _pool.POOL,
    ) -> None:
        self._cfg = cfg
        self._plan = plan
        self._partition = partition
        self._task = task
        self._pool = pool
        self._states = ParticipantStateMachine(_MOVES, f"partition {partition}")
        self._marker: Marker | None = None
        self.reused = False
        started = time.perf_counter()
        self._lease = pool.acquire(self._pool_key())
        self._clients = self._lease.clients
        with _budget():
            why = self._open()
        self.why_new = "" if self.reused else why
        log.debug(
            "epoch %d partition %d: %s in %.1f ms",
            plan.epoch,
            partition,
            "pooled producer" if self.reused else f"new producer ({why})",
            1000 * (time.perf_counter() - started),
        )
        self._writer = RecordWriter(self._live(), self._clients.errors, layout, cfg.topic)

    def _pool_key(self) -> _pool.Key:
        raise NotImplementedError

    def _open(self) -> str:
        """Make the clients ready; return why no pooled producer serves (if none does)."""
        raise NotImplementedError

    def _live(self) -> Producer:
        producer = self._clients.producer
        if producer is None:
            msg = f"partition {self._partition}: the producer was dropped after a fatal error"
            raise RuntimeError(msg)
        return producer

    def _reuse(self) -> None:
        """Serve with the pooled producer (its delivery errors start afresh)."""
        self._clients.errors.first, self._clients.errors.count = None, 0
        self.reused = True

    # -- the contract --------------------------------------------------------------------
    def committed_marker(self) -> Marker | None:
        """Return the partition's marker (None in the non-transactional guarantees)."""
        if self._states.state is _S.READY:  # a reused producer's marker was read when deciding
            return self._marker
        with self._states.step(_S.READY, _failed), _budget():
            self._marker = self._read_marker()
        return self._marker

    def _read_marker(self) -> Marker | None:
        return None

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        """Read the rows without writing (a replay that only compares with the marker)."""
        return rows.summary()

    def begin(self, epoch: int) -> None:
        """Begin the epoch (and its Kafka transaction, exactly-once)."""
        with self._states.step(_S.IN_TXN, _failed), _budget():
            self._begin()

    def _begin(self) -> None:
        return None

    def write(self, rows: ArrowPartition) -> RowSummary:
        """Produce every row once, summarizing on the way."""
        with self._states.step(_S.WRITTEN, _failed):
            self._writer.write(rows.batches())
            return rows.summary()

    def pre_commit(self, summary: RowSummary) -> None:
        """Flush, surfacing delivery errors (and put the marker in the transaction, exactly-once)."""
        with self._states.step(_S.PRE_COMMITTED, _failed), _budget():
            self._writer.flush(self._cfg.transaction_timeout_ms / 1000.0)
            self._put_marker(summary)

    def _put_marker(self, summary: RowSummary) -> None:
        return None

    def commit(self) -> None:
        """Commit the epoch (the Kafka transaction, exactly-once)."""
        with self._states.step(_S.DONE, _failed), _budget():
            self._commit()

    def _commit(self) -> None:
        return None

    def abort(self) -> None:
        """Abort the open epoch, if any. Idempotent.

        After a clean abort the clients may be pooled; after a failure never.
        """
        state = self._states.state
        if state is _S.READY:  # nothing begun: a clean end
            self._states.move(_S.DONE)
            return
        if state not in _TXN_OPEN and state is not _S.FAILED_IN_TXN:
            return
        with _budget():
            self._abort()
        self._states.move(_S.FAILED if state is _S.FAILED_IN_TXN else _S.DONE)

    def _abort(self) -> None:
        return None

    def _clean(self) -> bool:
        """Whether the epoch ended cleanly: the lease may keep the producer."""
        clean = self._states.state is _S.DONE and self._clients.errors.first is None
        if not clean:
            log.debug(
                "epoch %d partition %d: producer not pooled (state %s, delivery error %s)",
                self._plan.epoch,
                self._partition,
                self._states.state.value,
                self._clients.errors.first,
            )
        return clean


class PlainKafkaParticipant(KafkaParticipant):
    """At-least-once / at-most-once: an idempotent producer, no transaction, no marker.

    Nothing fences such a producer, so any task of the worker may use it after another:
    one pooled producer per worker and producer settings.
    """

    def _pool_key(self) -> _pool.Key:
        return plain_pool_key(self._cfg)

    def _open(self) -> str:
        if self._lease.pooled_producer:
            self._reuse()
            return ""
        self._clients.errors = DeliveryErrors()
        self._clients.producer = new_producer(self._cfg, None, self._clients.errors)
        return "no transactions"

    def close(self) -> None:
        """Flush what is queued (nothing may be lost silently); pool the producer if clean."""
        producer = self._clients.producer
        left = producer.flush(CLOSE_TIMEOUT_S) if producer is not None else 0
        self._lease.release(clean=left == 0 and self._clean())


class TransactionalKafkaParticipant(KafkaParticipant):
    """Exactly-once: one transactional producer of id ``{sink_id}-{partition}``.

    Opening: take this process's pooled clients of the transactional id (a lease of
    ``_pool``) and ask the stage's :class:`~connectors.stage.ReuseTicket` whether the
    pooled producer may serve (it owns every rule); otherwise a spare or new producer runs
    ``init_transactions`` (fencing every older instance and aborting their open
    transaction) and the marker is read after it. :meth:`close` releases the lease clean
    only when the transaction ended cleanly (state DONE).
    """

    _pending_marker: Marker | None = None  # in the open transaction, not yet committed

    def _pool_key(self) -> _pool.Key:
        return pool_key(self._cfg, self._partition)

    @property
    def _txn_id(self) -> str:
        return self._cfg.transactional_id(self._partition)

    def _open(self) -> str:
        clients = self._clients
        spare = None
        if clients.consumer is None:
            spare = self._lease.take_spare()
            clients.consumer = (
                spare.consumer
                if spare is not None
                else marker_consumer(self._cfg.cluster, self._cfg.marker_group(self._partition))
            )
        try:
            return self._reuse_or_init(spare)
        except BaseException:
            with contextlib.suppress(KafkaException, RuntimeError):
                clients.consumer.close()
            clients.consumer = None
            raise

    def _reuse_or_init(self, spare: _pool.Spare | None) -> str:
        clients = self._clients
        consumer = clients.consumer
        assert consumer is not None  # noqa: S101 - set by the caller
        pooled = self._lease.pooled_producer
        if self._task is None:
            why = "no task binding (driver-side use)"
        else:
            decision = self._task.reuse.decide(
                self._task.task_attempt,
                clients.generation if pooled else None,
                clients.committed if pooled else None,
                lambda: read_marker(consumer, self._cfg.marker_topic),
            )
            if decision.reuse and pooled:
                self._reuse()
                clients.committed = self._marker = decision.marker
                self._states.move(_S.READY)
                return decision.reason
            why = decision.reason
        if spare is None:
            spare = self._lease.take_spare()
            if spare is not None:  # the pooled consumer serves; the spare's is not needed
                with contextlib.suppress(KafkaException, RuntimeError):
                    spare.consumer.close()
        if spare is not None:
            clients.errors, clients.producer = spare.errors, spare.producer
            why += "; a spare producer, created earlier"
        else:
            clients.errors = DeliveryErrors()
            clients.producer = new_producer(self._cfg, self._txn_id, clients.errors)
        clients.committed = None
        init_transactions(clients.producer, self._txn_id)
        return why

    def _read_marker(self) -> Marker | None:
        assert self._clients.consumer is not None  # noqa: S101 - kept from open to close
        marker = read_marker(self._clients.consumer, self._cfg.marker_topic)
        # Read after this instance's init: the baseline a later reuse compares with.
        self._clients.committed = marker
        return marker

    def _begin(self) -> None:
        try:
            self._live().begin_transaction()
        except KafkaException as exc:
            raise to_write_error(exc, "begin_transaction") from exc

    def _put_marker(self, summary: RowSummary) -> None:
        assert self._clients.consumer is not None  # noqa: S101 - kept from open to close
        marker = Marker(self._plan.epoch, summary.rows, summary.checksum)
        offset, meta = encode_marker(marker)
        tp = TopicPartition(self._cfg.marker_topic, 0, offset, metadata=meta)
        group = self._clients.consumer.consumer_group_metadata()
        producer = self._live()
        call_with_retry(
            "send_offsets_to_transaction",
            lambda: producer.send_offsets_to_transaction([tp], group, TXN_CALL_TIMEOUT_S),
        )
        self._pending_marker = marker

    def _commit(self) -> None:
        """Commit the transaction (retried while retriable; fenced raises)."""
        producer = self._live()
        try:
            call_with_retry(
                "commit_transaction", lambda: producer.commit_transaction(TXN_CALL_TIMEOUT_S)
            )
        except Exception as exc:
            if classify(exc) is ErrorAction.FATAL:
                self._drop()
            raise
        self._clients.committed = self._pending_marker

    def _abort(self) -> None:
        """Abort the open transaction; a fenced or fatal producer is dropped instead."""
        producer = self._clients.producer
        if producer is None:
            return
        try:
            call_with_retry(
                "abort_transaction", lambda: producer.abort_transaction(TXN_CALL_TIMEOUT_S)
            )
        except Exception:
            # A fenced or fatal producer cannot abort; the broker (or the next
            # init_transactions of this id) aborts its transaction. Never continue.
            self._drop()
            raise

    def _drop(self) -> None:
        self._clients.producer = None
        self._states.fail(_S.DEAD)

    def close(self) -> None:
        """Release the lease (the producer kept only if clean) and top up the spares.

        A producer with an open transaction is released without an abort: the next
        ``init_transactions`` of its id aborts it.
        """
        self._clients.generation = self._task.reuse.generation if self._task else ""
        self._lease.release(clean=self._clean())
        fill_spares(self._pool, self._cfg, self._plan.parallelism)


@dataclass(frozen=True)
class KafkaResource(Resource[ArrowPartition]):
    """Driver-side, picklable description of the sink's Kafka side.

    ``task``: set in the write task by :meth:`for_task` (client reuse).
    """

    cfg: SinkConfig
    layout: RecordLayout
    task: TaskInfo | None = None

    def for_task(self, task: TaskInfo) -> KafkaResource:
        """Return this resource bound to the write task ``task``."""
        return replace(self, task=task)

    def open(self, plan: EpochPlan, partition: int) -> KafkaParticipant:
        """Create or reuse the task's clients (the participant of the guarantee)."""
        kind = TransactionalKafkaParticipant if self.cfg.transactional else PlainKafkaParticipant
        return kind(self.cfg, self.layout, plan, partition, task=self.task)

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
