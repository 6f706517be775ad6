"""Kafka as a ``txn`` participant: one producer per write partition.

Kafka transactions cannot be completed from another process (librdkafka cannot resume
another instance's transaction), so ``completable_by_coordinator`` is False: each write
task commits its own transaction, and recovery redoes the missing part of an epoch,
skipping partitions whose marker says they committed (docs/architecture.md).

Two participants, chosen by the guarantee (``_resource.KafkaResource.open``):
``_transactional.TransactionalKafkaParticipant`` (exactly-once) and
:class:`PlainKafkaParticipant` (at-least-once, at-most-once), both on the shared part here,
:class:`KafkaParticipant`. Both get their clients from the sink's producer strategy
(``_strategy``: a new producer per task, or one kept by the worker) and hand them back in
``close``, telling whether the epoch ended cleanly (``_reuse.ended_cleanly``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence

import pyarrow as pa
from confluent_kafka import Producer

from connectors.kafka import _client
from connectors.kafka._sink._bad_records import produce_dead_letters
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._reuse import ended_cleanly
from connectors.kafka._sink._strategy import Clients, TaskProducers
from connectors.kafka._sink._writer import RecordLayout, RecordWriter
from connectors.stage import ArrowPartition, DeadLetterContext
from connectors.stage._retry import step_budget
from connectors.stage._states import ParticipantState, ParticipantStateMachine
from txn import EpochPlan, Marker, Participant, RowSummary

log = logging.getLogger("connectors.kafka.participant")

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
    return step_budget(_client.BROKER_RESTART_WAIT_S)


def _failed(start: ParticipantState) -> ParticipantState:
    """Return the state after a failed step that began in ``start``."""
    return _S.FAILED_IN_TXN if start in _TXN_OPEN else _S.FAILED


class KafkaParticipant(Participant[ArrowPartition]):
    """Write partition ``partition`` of one epoch (contract: :class:`txn.Participant`).

    The part both guarantees share: the clients of the producer strategy, the states, the
    writer. ``reused`` and ``why_new`` say whether a kept producer served (diagnostics).
    """

    def __init__(
        self,
        cfg: SinkConfig,
        layout: RecordLayout,
        plan: EpochPlan,
        partition: int,
        *,
        producers: TaskProducers,
    ) -> None:
        self._cfg = cfg
        self._plan = plan
        self._partition = partition
        self._producers = producers
        self._states = ParticipantStateMachine(_MOVES, f"partition {partition}")
        self._marker: Marker | None = None
        started = time.perf_counter()
        with _budget():
            why = self._open()  # raising leaves nothing open
        self.reused = producers.reused
        self.why_new = "" if self.reused else why
        log.debug(
            "epoch %d partition %d: %s in %.1f ms",
            plan.epoch,
            partition,
            "kept producer" if self.reused else f"new producer ({why})",
            1000 * (time.perf_counter() - started),
        )
        self._writer = RecordWriter(self._live(), self._clients.errors, layout, cfg.topic)

    @property
    def _clients(self) -> Clients:
        return self._producers.clients

    def _open(self) -> str:
        """Make the clients ready; return why no kept producer serves (if none does)."""
        return self._producers.open()

    def _live(self) -> Producer:
        producer = self._clients.producer
        if producer is None:
            msg = f"partition {self._partition}: the producer was dropped after a fatal error"
            raise RuntimeError(msg)
        return producer

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

    def write_dead_letters(
        self, records: Sequence[pa.RecordBatch], context: DeadLetterContext
    ) -> None:
        """Produce bad records to the dead-letter topic (exactly-once: in the transaction)."""
        produce_dead_letters(self._live(), self._clients.errors, self._cfg, records, context)

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
        """Whether the epoch ended cleanly: the strategy may keep the producer."""
        clean = ended_cleanly(self._states.state, self._clients.errors.first)
        if not clean:
            log.debug(
                "epoch %d partition %d: producer not kept (state %s, delivery error %s)",
                self._plan.epoch,
                self._partition,
                self._states.state.value,
                self._clients.errors.first,
            )
        return clean


class PlainKafkaParticipant(KafkaParticipant):
    """At-least-once / at-most-once: an idempotent producer, no transaction, no marker."""

    def close(self) -> None:
        """Flush what is queued (nothing may be lost silently); the producer kept if clean."""
        producer = self._clients.producer
        left = producer.flush(CLOSE_TIMEOUT_S) if producer is not None else 0
        self._producers.close(clean=left == 0 and self._clean(), committed=False)
