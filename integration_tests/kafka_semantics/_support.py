"""Client helpers for the Kafka semantics suite.

Everything here uses confluent-kafka over TCP against the session's bootstrap address. The
helpers never assume a particular broker implementation: they wait for broker background work
(transaction markers, timeouts) by polling observable state with generous deadlines, because the
test machine is shared and busy.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from ._wire import WireClient

# Seconds for one client call (init/commit/abort transaction, flush, admin request); generous
# because coordinator lookups on a busy 2-core machine can take several seconds.
CLIENT_TIMEOUT_S = 60.0
# Seconds to wait for broker background work to become visible (markers written, LSO moved,
# group offsets materialised, a timed-out transaction aborted).
SETTLE_TIMEOUT_S = 90.0
# Seconds between two polls of observable broker state while waiting.
POLL_INTERVAL_S = 0.2
# Seconds a consumer poll blocks at most while reading a partition to its end.
CONSUMER_POLL_S = 0.5
# Seconds a read of one partition to its end may take at most.
READ_TIMEOUT_S = 90.0
# Milliseconds the broker may hold an empty fetch of an end-of-partition reader: the end is
# seen only through an empty fetch, which Kafka's default (500) delays.
EMPTY_FETCH_WAIT_MS = 20

FENCED_CODES = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


@dataclass(frozen=True)
class Record:
    """One consumed record: its offset and its value decoded as UTF-8."""

    offset: int
    value: str


# FindCoordinator key types: a consumer group, a transactional id.
GROUP_KEY, TXN_KEY = 0, 1


def unique(prefix: str) -> str:
    """Return a name unique to this test run (transactional ids, group ids)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def plain_producer(bootstrap: str, **conf: Any) -> Producer:
    """Return a non-transactional producer (idempotence off unless ``conf`` turns it on)."""
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **conf})


def txn_producer(bootstrap: str, txn_id: str, **conf: Any) -> Producer:
    """Return a transactional producer on which ``init_transactions`` already succeeded."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0, **conf}
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer


def produce_values(
    producer: Producer, topic: str, values: Iterable[str], partition: int = 0
) -> None:
    """Produce ``values`` in order to one partition and flush; raise on any delivery error."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for value in values:
        producer.produce(topic, value=value.encode(), partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    if errors:
        raise KafkaException(errors[0])
    assert remaining == 0, f"{remaining} messages still queued after flush"


def commit_values(
    producer: Producer, topic: str, values: Iterable[str], partition: int = 0
) -> None:
    """Produce ``values`` to one partition in one transaction and commit it."""
    producer.begin_transaction()
    produce_values(producer, topic, values, partition)
    producer.commit_transaction(CLIENT_TIMEOUT_S)


def group_consumer(bootstrap: str, group: str, *, committed: bool, **conf: Any) -> Consumer:
    """Return a consumer of ``group`` that never subscribes (no group membership).

    ``committed`` picks read_committed, which also makes ``Consumer.committed()`` ask for stable
    offsets only (KIP-447: OffsetFetch with require_stable).
    """
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            **conf,
        }
    )


def end_offsets(admin: AdminClient, topic: str, partition: int = 0) -> tuple[int, int]:
    """Return (high watermark, last stable offset) of one partition via ListOffsets."""
    tp = TopicPartition(topic, partition)
    result: list[int] = []
    for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest()}, isolation_level=level, request_timeout=CLIENT_TIMEOUT_S
        )
        result.append(futures[tp].result(timeout=CLIENT_TIMEOUT_S).offset)
    return result[0], result[1]


def earliest_offset(admin: AdminClient, topic: str, partition: int = 0) -> int:
    """Return the log start offset of one partition via ListOffsets."""
    tp = TopicPartition(topic, partition)
    futures = admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=CLIENT_TIMEOUT_S)
    return int(futures[tp].result(timeout=CLIENT_TIMEOUT_S).offset)


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Poll ``check`` until it returns true; fail the test with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)


def wait_stable(admin: AdminClient, topic: str, partition: int = 0) -> int:
    """Wait until no transaction is open on the partition (LSO == HW); return that offset."""
    seen: list[tuple[int, int]] = []

    def stable() -> bool:
        seen.append(end_offsets(admin, topic, partition))
        return seen[-1][0] == seen[-1][1]

    wait_until(stable, f"LSO to reach the high watermark on {topic}/{partition} (last {seen[-1:]})")
    return seen[-1][0]


def eof_reader(bootstrap: str, *, committed: bool, **conf: Any) -> Consumer:
    """Return a consumer (no group membership) that reports the end of a partition."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "fetch.wait.max.ms": EMPTY_FETCH_WAIT_MS,
            **conf,
        }
    )


def consume_to_eof(consumer: Consumer, topic: str, partition: int = 0) -> list[Message]:
    """Assign one partition from its beginning and return its messages up to the EOF event.

    The end is the high watermark for read_uncommitted and the LSO for read_committed; it is
    detected by librdkafka's partition-EOF event, so control records and aborted batches (which
    leave offset gaps) do not confuse the count.
    """
    consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)  # assigned without, a fetch waits
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    return poll_messages(consumer)


def poll_messages(
    consumer: Consumer, *, count: int | None = None, timeout_s: float = READ_TIMEOUT_S
) -> list[Message]:
    """Poll an assigned consumer for ``count`` messages, or (None) up to its next EOF event."""
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while count is None or len(messages) < count:
        assert time.monotonic() < deadline, f"no EOF after {len(messages)} messages: {messages}"
        msg = consumer.poll(CONSUMER_POLL_S)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                if count is None:
                    return messages
                continue
            raise KafkaException(err)
        messages.append(msg)
    return messages


def read_partition(
    bootstrap: str, topic: str, partition: int = 0, *, committed: bool, **conf: Any
) -> list[Record]:
    """Read one partition from the beginning to its end for the given isolation level.

    See :func:`consume_to_eof` for where the end is. Call ``wait_stable`` first when the caller
    needs "everything that was ever committed" rather than "everything up to the current LSO".
    ``conf`` adds client settings (a secured listener's).
    """
    consumer = eof_reader(bootstrap, committed=committed, **conf)
    try:
        messages = consume_to_eof(consumer, topic, partition)
    finally:
        consumer.close()
    return [Record(m.offset(), m.value().decode()) for m in messages]


def values(records: Iterable[Record]) -> list[str]:
    """Return just the values of ``records``, in order."""
    return [r.value for r in records]


def broker_config(admin: AdminClient, name: str) -> str:
    """Return one broker-level config value via DescribeConfigs on a live broker."""
    metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    broker_id = metadata.controller_id if metadata.controller_id >= 0 else min(metadata.brokers)
    resource = ConfigResource(ResourceType.BROKER, str(broker_id))
    futures = admin.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)
    entries = futures[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert name in entries, f"broker {broker_id} does not describe {name}"
    value = entries[name].value
    assert value is not None, f"broker {broker_id} describes {name} without a value"
    return str(value)


def fatal_error_of(exc: KafkaException) -> KafkaError:
    """Return the KafkaError carried by ``exc`` (confluent-kafka puts it in args[0])."""
    err = exc.args[0]
    assert isinstance(err, KafkaError), f"exception without KafkaError: {exc!r}"
    return err


def coordinator_of(admin: AdminClient, key: str, key_type: int) -> int:
    """The broker FindCoordinator names for a group (key type 0) or transactional id (1)."""
    broker = next(iter(admin.list_topics(timeout=CLIENT_TIMEOUT_S).brokers.values()))
    with WireClient(broker.host, broker.port) as client:
        found = client.find_coordinator(key, key_type)
    assert found.error_code == 0, f"FindCoordinator({key!r}) answered error {found.error_code}"
    return found.node_id
