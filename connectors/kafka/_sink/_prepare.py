"""Prepared producers: a worker initializes, between its tasks, its lane of the partitions it did not write.

Why: Spark moves write partition ``p`` between the Python workers of an executor in most
epochs; with lanes (``_lanes``) each worker keeps a live producer of every partition it
wrote, but the first time a worker gets ``p`` it had to run ``init_transactions`` on the
critical path. After a task that committed, the worker prepares in a background thread
(``_pool.ClientPool.prepare``) a producer on its own lane ``k`` of every other partition
``q`` (and of the partition it wrote, when it wrote it on the shared lane: redos and
unaligned fresh opens); a later task of the worker reports it (``ClientNote.prepared``,
reuse rule 6 in ``connectors.stage``'s ``_reuse``), and from the next epoch on it serves
like any pooled producer the driver knows.

Contract of :func:`prepare_lanes` (whom a preparation may fence, and why nobody serving):

1. only after a *commit* of a steady task (the first attempt of the first stage run of the
   first plan attempt), on a worker lane the worker *claimed* (no other worker of the host
   uses it; the shared lane, which redos and unaligned fresh opens use, is never
   claimed), and for ``(q, k)`` where the ticket knows no instance (so no other host's
   worker of lane ``k`` that the driver saw serve it is fenced) and, checked when its
   turn in the round comes, the driver was not told of this worker's pooled producer of
   ``(q, k)`` in the same stage run or a later one (it served, or was reported, there:
   the driver learns it at the end of the run) and no later round prepared it (a slow
   round must not replace a newer instance: the driver would drop both, rule 6); a pooled
   producer the driver was told of earlier but does not know (it dropped the note) is
   replaced;
2. in unaligned epochs only partitions the ticket has seen served: the first open of a
   partition in a generation fences every lane, in no known order against a preparation
   of the same run (the driver would drop the note, rule 6);
3. a prepared producer comes warm: marker consumer read once, the output topic's
   metadata and the marker group's coordinator looked up (:func:`_warm`: an aborted
   transaction, nothing of it visible);
4. at most ``MAX_PREPARED`` producers per round; a failure drops the preparation (logged at
   debug), never the task.

The safety argument (a prepared instance never commits an epoch a redo also commits):
docs/kafka-sink.md, "Why at most one instance commits epoch N of partition p".
"""

from __future__ import annotations

import contextlib
import logging

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from connectors.kafka._sink import _pool, _pool_entries
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._lanes import Lane
from connectors.kafka._sink._markers import marker_consumer, read_marker
from connectors.kafka._sink._producers import init_transactions, new_producer, pool_key
from connectors.kafka._sink._writer import DeliveryErrors
from connectors.stage import ReuseTicket, TaskInfo

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
    task: TaskInfo,
    written: tuple[int, int],
    parallelism: int,
    lane: Lane,
) -> None:
    """Prepare this worker's ``lane`` of the sink's ``parallelism`` partitions (see the contract).

    ``written``: the sink's partition the task wrote and the lane it wrote on (the shared
    lane when it could not use its own: then its own lane of that partition is prepared too).
    ``task.partition`` may be offset in a composite sink's numbering; notes use that one.
    """
    partition, served_on = written
    ticket = task.reuse
    if not lane.claimed or not task.may_reuse:
        return
    offset = task.partition - partition
    seen = {n.partition for n in ticket.known if not n.prepared}
    wanted: list[tuple[_pool_entries.Key, _pool_entries.Preparer]] = []
    for q in range(parallelism):
        key = pool_key(cfg, q, lane.index)
        if (q, lane.index) == (partition, served_on):
            continue
        if ticket.known_token(q + offset, lane.index) is not None:
            continue
        if not ticket.gated and q + offset not in seen:  # its first open may fence every lane
            continue
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


def report_prepared(pool: _pool.ClientPool, task: TaskInfo) -> None:
    """Add the finished, unreported preparations of the task's generation to its notes."""
    for rec in pool.take_reports(task.reuse.generation, task.reuse.serial):
        log.debug(
            "ticket %d, partition %d: reports partition %d lane %d prepared %s under ticket %d",
            task.reuse.serial,
            task.partition,
            rec.partition,
            rec.lane,
            rec.token,
            rec.serial,
        )
        task.note_prepared(rec.partition, rec.lane, rec.token, rec.serial)


def _preparer(
    cfg: SinkConfig, partition: int, lane: int, note_partition: int, ticket: ReuseTicket
) -> _pool_entries.Preparer:
    txn_id = cfg.transactional_id(partition, lane)

    def make(
        spare: _pool_entries.Spare | None, pooled: Consumer | None
    ) -> tuple[_pool_entries.PoolEntry, _pool_entries.Prepared]:
        errors = spare.errors if spare is not None else DeliveryErrors()
        producer = spare.producer if spare is not None else new_producer(cfg, txn_id, errors)
        extra = spare.consumer if spare is not None else None
        if pooled is not None:
            consumer = pooled
        elif extra is not None:
            consumer, extra = extra, None
        else:
            consumer = marker_consumer(cfg.cluster, cfg.marker_group(partition))
        _close(extra)  # the spare's, when the pooled consumer serves
        try:
            token = init_transactions(producer, txn_id)
            read_marker(consumer, cfg.marker_topic)  # warms the group coordinator
            if cfg.topic is not None:
                _warm(producer, consumer, cfg.topic)
        except Exception:
            log.debug("preparing %s failed; the next task opens its own", txn_id, exc_info=True)
            if pooled is None:
                _close(consumer)
            raise
        entry = _pool_entries.PoolEntry(
            producer, errors, consumer, token, ticket.generation, ticket.serial
        )
        return entry, _pool_entries.Prepared(
            note_partition, lane, token, ticket.generation, ticket.serial
        )

    return make


def _warm(producer: Producer, consumer: Consumer, topic: str) -> None:
    """Have ``producer`` look up what its first transaction would look up on the critical path.

    The output topic's metadata (``list_topics``), and the marker group's coordinator: a
    transaction that only stages an offset of the marker group for the *output* topic's
    partition 0 (a partition no marker read asks for) and is aborted, so nothing of it is
    ever visible. A failed look-up is left to the first task (e.g. a principal without
    Read on the output topic: the offset is refused, the abort ends the transaction); a
    failed abort drops the preparation (the producer's state is then unknown).
    """
    with contextlib.suppress(KafkaException):
        producer.list_topics(topic, METADATA_TIMEOUT_S)
    group = consumer.consumer_group_metadata()
    producer.begin_transaction()
    with contextlib.suppress(KafkaException):
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 0)], group, METADATA_TIMEOUT_S
        )
    producer.abort_transaction(METADATA_TIMEOUT_S)


def _close(consumer: Consumer | None) -> None:
    if consumer is not None:
        with contextlib.suppress(KafkaException, RuntimeError):
            consumer.close()
