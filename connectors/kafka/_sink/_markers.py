"""Idempotency markers: "write partition p committed epoch N with this content".

Scheme (why: the marker must become visible exactly when the data does):

1. write partition ``p`` owns the consumer group ``{sink_id}.marker.{p}`` (``_names``);
2. inside the same Kafka transaction as its data, the task commits an offset for
   that group with ``send_offsets_to_transaction``: topic ``marker_topic`` (an
   existing one-partition topic, because real Kafka rejects offset commits for
   partitions that do not exist), partition 0, offset ``epoch + 1``, metadata the
   compact JSON ``{"epoch":N,"rows":R,"checksum":"..."}``;
3. transactional offset commits become visible atomically with the transaction's
   records, so the committed offset of the group *is* the commit record;
4. a reader uses a ``read_committed`` consumer of that group and ``committed()``
   (KIP-447's stable offsets: a pending offset is never returned).
"""

from __future__ import annotations

import json

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from connectors.kafka import _client
from connectors.kafka._client import (
    ClientConfig,
    Cluster,
    admin_client,
    broker_restart,
    call_with_retry,
    cluster_of,
    raise_if_denied,
)
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from txn import Marker

# Seconds one committed() call may take; it waits for pending transactional offsets
# of an aborted or finishing transaction to settle (UNSTABLE_OFFSET_COMMIT).
COMMITTED_TIMEOUT_S = 30.0


def encode_marker(marker: Marker) -> tuple[int, str]:
    """Offset and metadata that store ``marker``."""
    meta = json.dumps(
        {"epoch": marker.epoch, "rows": marker.rows, "checksum": marker.checksum},
        separators=(",", ":"),
    )
    return marker.epoch + 1, meta


def decode_marker(offset: int, metadata: str | None) -> Marker | None:
    """Return the marker stored as ``offset`` / ``metadata``; None when nothing is committed.

    Raises:
        KafkaCode.MARKER: the group holds an offset the sink did not write.

    """
    if offset < 0:
        return None
    try:
        doc = json.loads(metadata or "")
        marker = Marker(
            epoch=int(doc["epoch"]), rows=int(doc["rows"]), checksum=str(doc["checksum"])
        )
    except (ValueError, KeyError, TypeError) as exc:
        msg = (
            f"marker offset {offset} has unreadable metadata {metadata!r} ({exc}); another "
            "application commits offsets to this sink's marker group. Use a sink_id of your own."
        )
        raise KafkaConnectorError(msg, code=KafkaCode.MARKER) from None
    if marker.epoch + 1 != offset:
        msg = f"marker offset {offset} disagrees with its metadata epoch {marker.epoch}"
        raise KafkaConnectorError(msg, code=KafkaCode.MARKER)
    return marker


def marker_consumer(cluster: Cluster, group: str) -> Consumer:
    """Return a consumer of ``group`` on ``cluster`` that reads only committed (stable) offsets."""
    return _client.consumer(
        cluster,
        {
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
        },
    )


def read_marker(consumer: Consumer, marker_topic: str) -> Marker | None:
    """Read the marker of the consumer's group (retried through a broker restart, bounded)."""

    def committed() -> TopicPartition:
        (tp,) = consumer.committed([TopicPartition(marker_topic, 0)], timeout=COMMITTED_TIMEOUT_S)
        if tp.error is not None and broker_restart(tp.error):  # e.g. the topic not loaded yet
            raise KafkaException(KafkaError(tp.error.code(), str(tp.error), retriable=True))
        return tp

    tp = call_with_retry("read marker", committed)
    consumer.poll(0)  # hands librdkafka's queued log lines to Python (never assigned: no records)
    if tp.error is not None:
        raise_if_denied(tp.error, f"reading the marker of {marker_topic}[0]")
        msg = f"reading marker of {marker_topic}[0] failed: {tp.error}"
        raise KafkaConnectorError(msg, code=KafkaCode.MARKER)
    return decode_marker(tp.offset, tp.metadata)


def read_markers(
    bootstrap_servers: str,
    sink_id: str,
    parallelism: int,
    *,
    marker_topic: str = _client.DEFAULT_MARKER_TOPIC,
    client_config: ClientConfig = None,
) -> dict[int, Marker | None]:
    """Marker of every write partition ``0 .. parallelism-1`` of sink ``sink_id``.

    ``client_config``: the librdkafka settings the sink's clients share (its
    ``client_config`` option: security, ``client.id``, ...).

    Raises:
        KafkaCode.CLIENT_CONFIG: ``client_config`` is invalid.
        KafkaCode.CONNECT: the cluster did not answer (``KafkaCode.AUTHENTICATION``:
            authentication failed).
        KafkaCode.MARKER: a marker group holds an offset the sink did not write.

    """
    cluster = cluster_of(bootstrap_servers, client_config)
    admin_client(cluster)  # first contact: a wrong address or credentials fail fast, typed
    out: dict[int, Marker | None] = {}
    for p in range(parallelism):
        consumer = marker_consumer(cluster, _client.marker_group(sink_id, p))
        try:
            out[p] = read_marker(consumer, marker_topic)
        finally:
            consumer.close()
    return out
