"""Kafka as a ``txn`` participant: one transactional producer per write partition.

Kafka transactions cannot be completed from another process (librdkafka cannot
resume another instance's transaction), so ``completable_by_coordinator`` is False:
each write task commits its own transaction, and recovery redoes the missing part
of an epoch, skipping partitions whose marker says they committed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from connectors.kafka._classify import ErrorAction, call_with_retry, classify, to_write_error
from connectors.kafka._config import SinkConfig
from connectors.kafka._markers import encode_marker, marker_consumer, read_marker
from connectors.kafka._rows import ArrowPartition
from connectors.kafka._writer import DeliveryErrors, Layout, RecordWriter
from txn import EpochPlan, Marker, Participant, Resource, RowSummary

# Seconds for init_transactions: it may wait for an older instance's transaction to
# be aborted by the broker, which takes a few round trips on a busy machine.
INIT_TIMEOUT_S = 60.0
# Seconds for commit/abort/send_offsets of one transaction (each is retried too).
TXN_CALL_TIMEOUT_S = 60.0
# Seconds a non-blocking close may wait for librdkafka to release a dead producer.
CLOSE_TIMEOUT_S = 5.0


def new_producer(cfg: SinkConfig, transactional_id: str | None, errors: DeliveryErrors) -> Producer:
    """Return a producer with the sink's settings; only failed deliveries are reported."""
    settings: dict[str, object] = dict(cfg.producer_settings(transactional_id))
    settings["on_delivery"] = errors
    settings["delivery.report.only.error"] = True
    return Producer(settings)


def init_transactions(producer: Producer, transactional_id: str) -> None:
    """Fence older instances of ``transactional_id`` and abort their open transaction."""
    call_with_retry(
        f"init_transactions({transactional_id})",
        lambda: producer.init_transactions(INIT_TIMEOUT_S),
    )


class KafkaParticipant(Participant[ArrowPartition]):
    """Write partition ``partition`` of one epoch (see :class:`txn.Participant`)."""

    def __init__(self, cfg: SinkConfig, layout: Layout, plan: EpochPlan, partition: int) -> None:
        self._cfg = cfg
        self._plan = plan
        self._partition = partition
        self._errors = DeliveryErrors()
        self._txn_id = cfg.transactional_id(partition) if cfg.transactional else None
        self._producer: Producer | None = new_producer(cfg, self._txn_id, self._errors)
        self._consumer: Consumer | None = None
        self._writer = RecordWriter(self._producer, self._errors, layout, cfg.topic)
        self._in_txn = False
        self._written = False
        self._marker: Marker | None = None
        self._marker_read = False
        if self._txn_id is not None:
            init_transactions(self._producer, self._txn_id)
            self._consumer = marker_consumer(cfg.bootstrap_servers, cfg.marker_group(partition))

    def _live(self) -> Producer:
        if self._producer is None:
            msg = f"partition {self._partition}: the producer was dropped after a fatal error"
            raise RuntimeError(msg)
        return self._producer

    def committed_marker(self) -> Marker | None:
        """Return the partition's marker (None in the non-transactional guarantees)."""
        if self._consumer is not None and not self._marker_read:
            self._marker = read_marker(self._consumer, self._cfg.marker_topic)
        self._marker_read = True
        return self._marker

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        """Return the row count and checksum; writes on the way when a write will follow.

        ``txn.run_partition`` summarizes before it writes, and a Spark partition can be
        read only once. So when the marker does not cover this epoch (the write is
        certain to follow), this call already begins the transaction and produces the
        rows while it summarizes them, in one streaming pass with bounded memory;
        ``begin`` and ``write`` then find the work done. The guarantees are the same:
        every record is inside the transaction, which commits only on the decision, and
        a failure here is a NO vote (run_partition aborts). When the marker covers the
        epoch (replay), it only reads and counts.
        """
        marker = self.committed_marker()
        if marker is not None and marker.epoch >= self._plan.epoch:
            return rows.summary(keep=False)
        self.begin(self._plan.epoch)
        self.write(rows)
        return rows.summary()

    def begin(self, epoch: int) -> None:
        """Begin the epoch's Kafka transaction (no-op without transactions, or if begun)."""
        if self._txn_id is None or self._in_txn:
            return
        try:
            self._live().begin_transaction()
        except KafkaException as exc:
            raise to_write_error(exc, "begin_transaction") from exc
        self._in_txn = True

    def write(self, rows: ArrowPartition) -> None:
        """Produce every row once; a mid_write fault of the FaultPlan fires inside the loop."""
        if self._written:
            return
        self._written = True
        plan = self._cfg.fault_plan
        fault = plan.mid_write_threshold(self._plan.epoch, self._partition) if plan else None
        if plan is not None and fault is not None:
            self._writer.write(
                rows.batches(), stop_after=fault.after_rows, on_stop=lambda: plan.fire_fault(fault)
            )
        else:
            self._writer.write(rows.batches())

    def pre_commit(self, summary: RowSummary) -> None:
        """Flush (surfacing delivery errors) and stage the marker in the transaction."""
        self._writer.flush(self._cfg.transaction_timeout_ms / 1000.0)
        if self._txn_id is None or self._consumer is None:
            return
        offset, meta = encode_marker(Marker(self._plan.epoch, summary.rows, summary.checksum))
        tp = TopicPartition(self._cfg.marker_topic, 0, offset, metadata=meta)
        group = self._consumer.consumer_group_metadata()
        producer = self._live()
        call_with_retry(
            "send_offsets_to_transaction",
            lambda: producer.send_offsets_to_transaction([tp], group, TXN_CALL_TIMEOUT_S),
        )

    def commit(self) -> None:
        """Commit the transaction (retried while retriable; fenced raises)."""
        if self._txn_id is None:
            return
        producer = self._live()
        try:
            call_with_retry(
                "commit_transaction", lambda: producer.commit_transaction(TXN_CALL_TIMEOUT_S)
            )
        except Exception as exc:
            if classify(exc) is ErrorAction.FATAL:
                self._producer = None  # fenced: never call this instance again
            raise
        self._in_txn = False

    def abort(self) -> None:
        """Abort the open transaction, if any; a fenced producer is dropped instead."""
        if not self._in_txn or self._producer is None:
            return
        producer = self._producer
        try:
            call_with_retry(
                "abort_transaction", lambda: producer.abort_transaction(TXN_CALL_TIMEOUT_S)
            )
        except Exception:
            # A fenced or fatal producer cannot abort; the broker (or the next
            # init_transactions of this id) aborts its transaction. Never continue with it.
            self._producer = None
            raise
        finally:
            self._in_txn = False

    def close(self) -> None:
        """Release the consumer and the producer (records of an aborted txn are purged)."""
        if self._consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.close()
            self._consumer = None
        if self._producer is not None:
            if self._txn_id is None:
                # Non-transactional: nothing may be lost silently; flush what is queued.
                self._producer.flush(CLOSE_TIMEOUT_S)
            self._producer = None


@dataclass(frozen=True)
class KafkaResource(Resource[ArrowPartition]):
    """Driver-side, picklable description of the sink's Kafka side."""

    cfg: SinkConfig
    layout: Layout

    def open(self, plan: EpochPlan, partition: int) -> KafkaParticipant:
        """Create the task's producer (fencing older instances of the same id)."""
        return KafkaParticipant(self.cfg, self.layout, plan, partition)

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
