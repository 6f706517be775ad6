"""Reading one metadata answer: the subscribed partitions, and what cannot be trusted yet.

A broker that is down, restarting or still loading its topics answers Metadata with
per-topic errors (``LEADER_NOT_AVAILABLE``, ``UNKNOWN_TOPIC_OR_PART``) or with no topics
at all. Such an answer is never a smaller set of partitions: :func:`read_metadata` sorts
each subscribed topic into found (no error), not ready (a transient error, retry) or
absent (not in the answer), and raises only for errors no retry can fix. Deciding when an
absence is real is the caller's job (:class:`~._cluster.ClusterView` confirms it over time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from connectors.kafka._client import classify, kafka_error_of
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from txn import ErrorAction

from ._offsets import TopicPartitionKey
from ._options import Subscription

_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Codes a broker answers while a topic's metadata or leader is not ready yet (starting,
# loading, electing): transient, although librdkafka does not flag them retriable.
_NOT_READY_CODES = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError._UNKNOWN_TOPIC,  # noqa: SLF001 - librdkafka's local codes
        KafkaError._UNKNOWN_PARTITION,  # noqa: SLF001
        KafkaError._NO_OFFSET,  # noqa: SLF001
        # ListOffsets before the partitions have leaders: "No leaders found".
        KafkaError._NOENT,  # noqa: SLF001
    }
)


def is_transient(error: KafkaError | BaseException) -> bool:
    """Whether retrying may fix ``error`` (the classifier's RETRY, or a not-ready code)."""
    err = error if isinstance(error, KafkaError) else kafka_error_of(error)
    if err is None:
        return False
    return err.code() in _NOT_READY_CODES or classify(err) is ErrorAction.RETRY


@dataclass(frozen=True, kw_only=True)
class MetadataView:
    """One metadata answer as the subscription sees it.

    Attributes:
        partitions: subscribed partitions of topics answered without a topic error.
        not_ready: ``(topic, error name)`` of subscribed topics answered with a transient error.
        absent: explicitly subscribed topics missing from the answer (``subscribe`` only).
        empty: the answer listed no topic at all (a loading broker answers so).

    """

    partitions: tuple[TopicPartitionKey, ...]
    not_ready: tuple[tuple[str, str], ...]
    absent: tuple[str, ...]
    empty: bool


def read_metadata(md: Any, sub: Subscription) -> MetadataView:
    """Sort the topics of ``md`` (a ``ClusterMetadata``) for ``sub``.

    Raises:
        KafkaCode.SOURCE_FATAL: a subscribed topic carries an error retrying cannot fix
            (authorization, invalid name); the message names the topic and the code.

    """
    found: list[TopicPartitionKey] = []
    not_ready: list[tuple[str, str]] = []
    for name, topic in sorted(md.topics.items()):
        if name in _INTERNAL_TOPICS or not sub.matches(name):
            continue
        if topic.error is None:
            found.extend((name, p) for p in topic.partitions)
        elif is_transient(topic.error):
            not_ready.append((name, topic.error.name()))
        else:
            msg = (
                f"topic {name!r}: the broker answered its metadata with {topic.error.name()}, "
                "which retrying cannot fix (check the topic name and the client's ACLs)"
            )
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_FATAL) from KafkaException(
                topic.error
            )
    absent = [t for t in sub.topics if t not in md.topics] if sub.kind == "subscribe" else []
    return MetadataView(
        partitions=tuple(sorted(found)),
        not_ready=tuple(not_ready),
        absent=tuple(absent),
        empty=not md.topics,
    )
