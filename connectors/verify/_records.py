"""Records as the checker sees them, and reading a topic to its end by position.

Reading contract:

1. the end of every partition is taken first with ``ListOffsets`` for the reader's isolation
   level (the last stable offset for ``read_committed``, the high watermark otherwise);
2. a consumer is assigned every partition from its beginning and polled until its *position*
   reaches that end on every partition; records are never counted to find the end, since
   control records and aborted batches leave gaps in the offsets;
3. a partition that does not reach its end in time raises :class:`ReadTimeoutError`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from connectors.kafka import _client
from connectors.kafka._client import ClientConfig, admin_client, cluster_of
from connectors.verify._errors import ReadTimeoutError, RecordFormatError

# Seconds to wait for topic metadata and ListOffsets answers on a busy shared machine.
ADMIN_TIMEOUT_S = 30.0
# Seconds one read of a whole topic may take before giving up (1M records fit well inside).
READ_TIMEOUT_S = 600.0
# Seconds one consume() call blocks waiting for records.
POLL_TIMEOUT_S = 0.5
# Seconds a consume() call that may reach the end blocks: markers and aborted records leave
# fewer records than offsets, so that call never fills and would wait POLL_TIMEOUT_S.
TAIL_POLL_S = 0.02
# Records fetched per consume() call.
CONSUME_BATCH = 5000

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


@dataclass(frozen=True, kw_only=True)
class Record:
    """One Kafka record at a position of a topic."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class RecordIdentity:
    """What the checker needs to know about a record: its unique id and its ordering key."""

    id: str
    key: str


IdentityFn = Callable[[Record], RecordIdentity]


def json_identity(record: Record) -> RecordIdentity:
    """Default identity: the value is JSON with an ``id`` and a ``key`` field.

    This is the format of :func:`make_input_value` (used by the demo and the e2e tests).
    """
    if record.value is None:
        msg = f"record {record.topic}/{record.partition}@{record.offset} has no value"
        raise RecordFormatError(msg)
    try:
        body = json.loads(record.value)
        return RecordIdentity(id=str(body["id"]), key=str(body["key"]))
    except (ValueError, KeyError, TypeError) as exc:
        msg = (
            f"record {record.topic}/{record.partition}@{record.offset} is not JSON with 'id' "
            f"and 'key' fields ({exc}); pass the identity of your records: "
            "key_fn=record_identity(...), or eos verify --id-field / --id-fn"
        )
        raise RecordFormatError(msg) from None


def make_input_value(record_id: int, key: str, seq: int) -> bytes:
    """Encode an input record value carrying its id, key and per-key sequence number."""
    return json.dumps({"id": record_id, "key": key, "seq": seq}, separators=(",", ":")).encode()


def end_offsets(
    bootstrap: str, topic: str, isolation: str, *, client_config: ClientConfig = None
) -> dict[int, int]:
    """Return the end offset of every partition of ``topic`` for ``isolation``.

    ``read_committed``: the last stable offset; ``read_uncommitted``: the high watermark.
    ``client_config``: the settings every client shares (security, as the sink's option).
    """
    admin = admin_client(cluster_of(bootstrap, client_config))  # typed if refused
    partitions = partition_ids(admin, topic)
    level = (
        IsolationLevel.READ_COMMITTED
        if isolation == READ_COMMITTED
        else IsolationLevel.READ_UNCOMMITTED
    )
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}  # type: ignore[no-untyped-call]
    futures = admin.list_offsets(request, isolation_level=level, request_timeout=ADMIN_TIMEOUT_S)
    return {tp.partition: fut.result(timeout=ADMIN_TIMEOUT_S).offset for tp, fut in futures.items()}


def partition_ids(admin: AdminClient, topic: str) -> list[int]:
    """Return the partition ids of ``topic``; raise :class:`ReadTimeoutError` if it is missing."""
    md = admin.list_topics(topic=topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
    if md is None or md.error is not None:
        msg = f"topic {topic!r} is not available: {None if md is None else md.error}"
        raise ReadTimeoutError(msg)
    return sorted(md.partitions)


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    isolation: str = READ_COMMITTED,
    ends: Mapping[int, int] | None = None,
    timeout_s: float = READ_TIMEOUT_S,
    client_config: ClientConfig = None,
) -> list[Record]:
    """Read every record of ``topic`` up to its end offsets (see the module contract).

    ``client_config``: the settings every client shares (security, as the sink's option).
    """
    if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
        msg = f"isolation must be {READ_COMMITTED!r} or {READ_UNCOMMITTED!r}, not {isolation!r}"
        raise ValueError(msg)
    cluster = cluster_of(bootstrap, client_config)
    targets = (
        dict(ends)
        if ends is not None
        else end_offsets(bootstrap, topic, isolation, client_config=cluster.config)
    )
    consumer = _client.consumer(
        cluster,
        {
            "group.id": f"eos-verify-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        },
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in targets])
        return _drain(consumer, topic, targets, timeout_s)
    finally:
        consumer.close()


def read_committed_topic(
    bootstrap: str, topic: str, *, client_config: ClientConfig = None
) -> list[Record]:
    """Read ``topic`` with a ``read_committed`` consumer up to its last stable offsets."""
    return read_topic(bootstrap, topic, isolation=READ_COMMITTED, client_config=client_config)


def _drain(
    consumer: Consumer, topic: str, targets: Mapping[int, int], timeout_s: float
) -> list[Record]:
    out: list[Record] = []
    pending = {p for p, end in targets.items() if end > 0}
    remaining = sum(targets[p] for p in pending)  # offsets left; records are at most this
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            positions = _positions(consumer, topic, pending)
            msg = f"reading {topic!r} did not reach the end offsets in {timeout_s}s: " + ", ".join(
                f"p{p} at {positions[p]} of {targets[p]}" for p in sorted(pending)
            )
            raise ReadTimeoutError(msg)
        batch, wait_s = (
            (max(1, remaining), TAIL_POLL_S)
            if remaining <= CONSUME_BATCH
            else (CONSUME_BATCH, POLL_TIMEOUT_S)
        )
        for msg_ in consumer.consume(batch, timeout=wait_s):
            err = msg_.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:  # noqa: SLF001 - public constant
                    continue
                raise KafkaException(err)
            partition = msg_.partition()
            offset = msg_.offset()
            if partition is None or offset is None or offset >= targets[partition]:
                continue
            out.append(
                Record(
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    key=msg_.key(),
                    value=msg_.value(),
                )
            )
        positions = _positions(consumer, topic, pending)
        pending = {p for p in pending if positions[p] < targets[p]}
        remaining = sum(targets[p] - max(positions[p], 0) for p in pending)
    return out


def _positions(consumer: Consumer, topic: str, partitions: set[int]) -> dict[int, int]:
    tps = consumer.position([TopicPartition(topic, p) for p in sorted(partitions)])
    return {tp.partition: tp.offset for tp in tps}
