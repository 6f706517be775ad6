"""Kafka as a ``txn`` participant: one transactional producer per write partition.

Kafka transactions cannot be completed from another process (librdkafka cannot
resume another instance's transaction), so ``completable_by_coordinator`` is False:
each write task commits its own transaction, and recovery redoes the missing part
of an epoch, skipping partitions whose marker says they committed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from connectors.kafka import _pool
from connectors.kafka._classify import ErrorAction, call_with_retry, classify, to_write_error
from connectors.kafka._config import SinkConfig
from connectors.kafka._markers import encode_marker, marker_consumer, read_marker
from connectors.kafka._rows import ArrowPartition
from connectors.kafka._writer import DeliveryErrors, Layout, RecordWriter
from txn import EpochPlan, Marker, Participant, Resource, RowSummary

log = logging.getLogger("connectors.kafka.participant")

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


def pool_key(cfg: SinkConfig, partition: int) -> tuple[str, ...]:
    """Pool key of a write task's clients: id, marker group and every producer setting."""
    txn_id = cfg.transactional_id(partition)
    settings = sorted(cfg.producer_settings(txn_id).items())
    return (txn_id, cfg.marker_group(partition), cfg.marker_topic, repr(settings))


class KafkaParticipant(Participant[ArrowPartition]):
    """Write partition ``partition`` of one epoch (see :class:`txn.Participant`).

    Opening (exactly-once), with ``reuse`` allowed only on the first attempt of the
    first stage run of the first plan attempt of the epoch:

    1. take this process's pooled clients of the transactional id (``_pool``);
    2. reuse path: a pooled producer whose last transaction ended cleanly, pooled under
       the same driver ``generation``, is kept if the marker read now equals the marker
       it committed itself (no other instance of the id committed since); the marker
       read is then the task's marker;
    3. otherwise (no pooled producer, reuse not allowed, or the marker differs): a new
       producer runs ``init_transactions`` (fencing every older instance and aborting
       their open transaction), and the marker is read after it;
    4. :meth:`close` returns the clients to the pool only if the transaction ended
       cleanly (committed, aborted without error, or never begun) with no error.
    """

    def __init__(
        self, cfg: SinkConfig, layout: Layout, plan: EpochPlan, partition: int,
        *, reuse: bool = False, generation: str = "",
    ) -> None:
        self._cfg = cfg
        self._generation = generation
        self._plan = plan
        self._partition = partition
        self._txn_id = cfg.transactional_id(partition) if cfg.transactional else None
        self._consumer: Consumer | None = None
        self._in_txn = False
        self._written = False
        self._failed = False
        self._committed: Marker | None = None
        self._staged: Marker | None = None
        self._marker: Marker | None = None
        self._marker_read = False
        self.reused = False
        self.why_new = "reuse not allowed (a retry, or not exactly-once)"
        started = time.perf_counter()
        if self._txn_id is None:
            self._errors = DeliveryErrors()
            self._producer: Producer | None = new_producer(cfg, None, self._errors)
        else:
            self._producer = self._open_transactional(self._txn_id, reuse)
        log.debug(
            "epoch %d partition %d: %s in %.1f ms", plan.epoch, partition,
            "pooled producer" if self.reused else f"new producer ({self.why_new})",
            1000 * (time.perf_counter() - started),
        )
        self._writer = RecordWriter(self._producer, self._errors, layout, cfg.topic)

    def _open_transactional(self, txn_id: str, reuse: bool) -> Producer:
        """Run steps 1-3 of the class docstring; return the producer to use."""
        cfg = self._cfg
        entry = _pool.take(pool_key(cfg, self._partition))
        self._consumer = entry.consumer if entry is not None else None
        if self._consumer is None:
            self._consumer = marker_consumer(cfg.bootstrap_servers, cfg.marker_group(self._partition))
        try:
            return self._reuse_or_init(txn_id, entry if reuse else None)
        except BaseException:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.close()
            self._consumer = None
            raise

    def _reuse_or_init(self, txn_id: str, entry: _pool.PoolEntry | None) -> Producer:
        cfg = self._cfg
        assert self._consumer is not None  # noqa: S101 - set by the caller
        if entry is None or entry.producer is None:
            self.why_new = "no pooled producer"
        elif entry.generation != self._generation:
            self.why_new = "pooled under an older client generation"
        else:
            self._marker = read_marker(self._consumer, cfg.marker_topic)
            self._marker_read = True
            if self._marker == entry.committed:
                entry.errors.first, entry.errors.count = None, 0
                self._errors = entry.errors
                self._committed = entry.committed
                self.reused = True
                return entry.producer
            self.why_new = f"marker {self._marker} is not the pooled one's {entry.committed}"
            self._marker_read = False  # another instance committed: fence it, read again
        self._errors = DeliveryErrors()
        producer = new_producer(cfg, txn_id, self._errors)
        init_transactions(producer, txn_id)
        return producer

    def _live(self) -> Producer:
        if self._producer is None:
            msg = f"partition {self._partition}: the producer was dropped after a fatal error"
            raise RuntimeError(msg)
        return self._producer

    def committed_marker(self) -> Marker | None:
        """Return the partition's marker (None in the non-transactional guarantees)."""
        if self._consumer is not None and not self._marker_read:
            self._failed = True  # until the read returns
            self._marker = read_marker(self._consumer, self._cfg.marker_topic)
            self._failed = False
            # Read after this instance's init: the baseline a later reuse compares with.
            self._committed = self._marker
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
            self._failed = True
            raise to_write_error(exc, "begin_transaction") from exc
        self._in_txn = True

    def write(self, rows: ArrowPartition) -> None:
        """Produce every row once; a mid_write fault of the FaultPlan fires inside the loop."""
        if self._written:
            return
        self._written = True
        self._failed = True  # until the write returns
        plan = self._cfg.fault_plan
        fault = plan.mid_write_threshold(self._plan.epoch, self._partition) if plan else None
        if plan is not None and fault is not None:
            self._writer.write(
                rows.batches(), stop_after=fault.after_rows, on_stop=lambda: plan.fire_fault(fault)
            )
        else:
            self._writer.write(rows.batches())
        self._failed = False

    def pre_commit(self, summary: RowSummary) -> None:
        """Flush (surfacing delivery errors) and stage the marker in the transaction."""
        self._failed = True  # until the marker is staged
        self._writer.flush(self._cfg.transaction_timeout_ms / 1000.0)
        if self._txn_id is None or self._consumer is None:
            self._failed = False
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
        self._failed = False

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
            self._failed = True  # never pooled again
            if classify(exc) is ErrorAction.FATAL:
                self._producer = None  # fenced: never call this instance again
            raise
        self._in_txn = False
        self._committed = self._staged

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
            self._failed = True
            raise
        finally:
            self._in_txn = False

    def close(self) -> None:
        """Pool the clients if the transaction ended cleanly, else release them.

        Pooled only when: exactly-once, no transaction open, no call failed, no delivery
        error, and the producer was not dropped. A producer with an open transaction is
        released without an abort: the next ``init_transactions`` of its id aborts it.
        """
        if self._txn_id is not None and self._consumer is not None:
            clean = not (self._in_txn or self._failed or self._errors.first is not None)
            producer = self._producer if clean else None
            if producer is None:
                log.debug(
                    "epoch %d partition %d: producer not pooled (in transaction: %s, failed: "
                    "%s, delivery error: %s)", self._plan.epoch, self._partition, self._in_txn,
                    self._failed, self._errors.first,
                )
            entry = _pool.PoolEntry(
                producer, self._errors, self._consumer, self._committed, self._generation
            )
            _pool.give_back(pool_key(self._cfg, self._partition), entry)
            self._consumer = None
            self._producer = None
            return
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
    # True only for the first attempt of a task in the first stage run of the first plan
    # attempt of an epoch: then a pooled producer may be reused (see KafkaParticipant).
    reuse_clients: bool = False
    # The driver's client generation: producers pooled under another one are not reused.
    generation: str = ""

    def open(self, plan: EpochPlan, partition: int) -> KafkaParticipant:
        """Create or reuse the task's clients (see :class:`KafkaParticipant`)."""
        return KafkaParticipant(
            self.cfg, self.layout, plan, partition, reuse=self.reuse_clients,
            generation=self.generation,
        )

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
