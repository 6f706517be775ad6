"""Prepared producers: a worker initializes, between its tasks, its lane of the partitions it did not write.

Why: Spark moves write partition ``p`` between the Python workers of an executor in most
epochs; with lanes (``_lanes``) each worker keeps a live producer of every partition it
wrote, but the first time a worker gets ``p`` it had to run ``init_transactions`` on the
critical path. After a task that committed, the worker prepares in a background thread
(``_pool.ClientPool.prepare``) a producer on its own lane ``k`` of every other partition
``q`` (and of the partition it wrote, when it wrote it on the shared lane: redos and
unaligned fresh opens); a later task of the worker reports it (``ProducerNote.prepared``;
the driver learns it when ``_reuse.prepared_order_known``), and from the next epoch on it
serves like any kept producer the driver knows.

Contract of :func:`prepare_lanes` (whom a preparation may fence, and why nobody serving):

1. a round starts only when ``_reuse.may_prepare`` (after a steady task committed, on a
   worker lane the worker claimed), and prepares ``(q, k)`` only when
   ``_reuse.may_prepare_lane`` (the ticket knows no instance of it; unaligned: only
   partitions the driver has seen served); when its turn in the round comes it is
   skipped if ``_reuse.newer_instance_kept`` (the driver was told of this worker's
   producer of ``(q, k)`` in the same stage run or a later one, or a later round prepared
   it). A kept producer the driver was told of earlier but does not know (it dropped the
   note) is replaced;
2. a prepared producer comes warm: marker consumer read once, the output topic's
   metadata and the marker group's coordinator looked up (:func:`_warm`: an aborted
   transaction, nothing of it visible);
3. at most ``MAX_PREPARED`` producers per round; a failure drops the preparation (logged
   at debug), never the task.

The safety argument (a prepared instance never commits an epoch a redo also commits):
docs/kafka-sink.md, "Why at most one instance commits epoch N of partition p".
"""

from __future__ import annotations

import contextlib
import logging

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from connectors.kafka._client import call_bounded
from connectors.kafka._sink import _pool
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._lanes import Lane
from connectors.kafka._sink._markers import marker_consumer, read_marker
from connectors.kafka._sink._producers import init_transactions, new_producer, pool_key
from connectors.kafka._sink._reuse import ProducerNote, ReuseTicket, may_prepare_lane
from connectors.kafka._sink._strategy import close_consumer
from connectors.kafka._sink._writer import DeliveryErrors
from connectors.stage import TaskInfo

log = logging.getLogger("connectors.kafka.sink.prepare")

# Producers one preparation round initializes at most: a worker writes one sink's
# partitions, so more than this many ids per round is a sink wider than one worker serves.
MAX_PREPARED = 16
# Seconds for each warm-up call of a prepared producer (the output topic's metadata, the
# marker group's coordinator: so its first task sends no Metadata or FindCoordinator).
METADATA_TIMEOUT_S = 10.0


def prepare_lanes(
    pool: _pool.ClientPool,
    cfg: SinkConfig,
    task: TaskInfo[object],
    ticket: ReuseTicket,
    written: tuple[int, int],
    parallelism: int,
    lane: Lane,
) -> None:
    """Prepare this worker's ``lane`` of the sink's ``parallelism`` partitions (the contract).

    Call only when ``_reuse.may_prepare``. ``written``: the sink's partition the task wrote
    and the lane it wrote on (the shared lane when it could not use its own: then its own
    lane of that partition is prepared too). ``task.partition`` may be offset in a
    composite sink's numbering; notes use that one.
    """
    partition, served_on = written
    offset = task.partition - partition
    wanted: list[tuple[_pool.Key, _pool.Preparer]] = []
    for q in range(parallelism):
        if (q, lane.index) == (partition, served_on):
            continue
        if not may_prepare_lane(ticket, q + offset, lane.index):
            continue
        key = pool_key(cfg, q, lane.index)
        wanted.append((key, _preparer(cfg, q, lane.index, q + offset, ticket)))
    if wanted:
        log.debug(
            "ticket %d, partition %d: preparing lane %d of %s",
            ticket.serial,
            task.partition,
            lane.index,
            [key[0] for key, _ in wanted[:MAX_PREPARED]],
        )
    pool.prepare(wanted[:MAX_PREPARED], generation=ticket.generation, serial=ticket.serial)


def report_prepared(pool: _pool.ClientPool, task: TaskInfo[object], ticket: ReuseTicket) -> None:
    """Send the finished, unreported preparations of ``ticket``'s generation as notes."""
    for rec in pool.take_reports(ticket.generation, ticket.serial):
        log.debug(
            "ticket %d, partition %d: reports partition %d lane %d prepared %s under ticket %d",
            ticket.serial,
            task.partition,
            rec.partition,
            rec.lane,
            rec.token,
            rec.serial,
        )
        note = ProducerNote(
            partition=rec.partition,
            lane=rec.lane,
            token=rec.token,
            prepared=True,
            serial=rec.serial,
        )
        task.send(note)


def _preparer(
    cfg: SinkConfig, partition: int, lane: int, note_partition: int, ticket: ReuseTicket
) -> _pool.Preparer:
    txn_id = cfg.transactional_id(partition, lane)

    def make(
        spare: _pool.Spare | None, pooled: Consumer | None
    ) -> tuple[_pool.PoolEntry, _pool.Prepared]:
        errors = spare.errors if spare is not None else DeliveryErrors()
        producer = spare.producer if spare is not None else new_producer(cfg, txn_id, errors)
        extra = spare.consumer if spare is not None else None
        if pooled is not None:
            consumer = pooled
        elif extra is not None:
            consumer, extra = extra, None
        else:
            consumer = marker_consumer(cfg.cluster, cfg.marker_group(partition))
        close_consumer(extra)  # the spare's, when the pooled consumer serves
        try:
            token = init_transactions(producer, txn_id)
            read_marker(consumer, cfg.marker_topic)  # warms the group coordinator
            if cfg.topic is not None:
                _warm(producer, consumer, cfg.topic)
        except Exception:
            log.debug("preparing %s failed; the next task opens its own", txn_id, exc_info=True)
            if pooled is None:
                close_consumer(consumer)
            raise
        entry = _pool.PoolEntry(
            producer=producer,
            errors=errors,
            consumer=consumer,
            token=token,
            generation=ticket.generation,
            serial=ticket.serial,
        )
        prepared = _pool.Prepared(
            partition=note_partition,
            lane=lane,
            token=token,
            generation=ticket.generation,
            serial=ticket.serial,
        )
        return entry, prepared

    return make


def _warm(producer: Producer, consumer: Consumer, topic: str) -> None:
    """Have ``producer`` look up what its first transaction would look up on the critical path.

    The output topic's metadata (``list_topics``), and the marker group's coordinator: a
    transaction that only stages an offset of the marker group for the *output* topic's
    partition 0 (a partition no marker read asks for) and is aborted, so nothing of it is
    ever visible. A failed look-up is left to the first task (e.g. a principal without
    Read on the output topic: the offset is refused, the abort ends the transaction); a
    failed abort drops the preparation (the producer's state is then unknown).

    The offsets call is bounded by ``call_bounded``, as the task's own is (see
    ``connectors.kafka._sink._transactional.send_offsets``): a call stuck in librdkafka
    raises its FATAL error, which drops the preparation and abandons the producer without
    calling it again, instead of holding the key "in preparation" for good.
    """
    with contextlib.suppress(KafkaException):
        producer.list_topics(topic, METADATA_TIMEOUT_S)
    group = consumer.consumer_group_metadata()
    offsets = [TopicPartition(topic, 0, 0)]
    producer.begin_transaction()
    with contextlib.suppress(KafkaException):
        call_bounded(
            "send_offsets_to_transaction (warm-up)",
            lambda: producer.send_offsets_to_transaction(offsets, group, METADATA_TIMEOUT_S),
            METADATA_TIMEOUT_S,
        )
    producer.abort_transaction(METADATA_TIMEOUT_S)
