"""Driver side: partition discovery, offset lookups and monitoring commits.

One :class:`ClusterView` per reader; its AdminClient is created lazily on first use (never
at construction, never pickled), so readers stay cheap to build and to ship to tasks.

Error actions (the Kafka connector's one classifier, ``connectors.kafka._classify``):
    - RETRY: retried with bounded exponential backoff, then :class:`KafkaUnavailableError`;
    - ABORT or FATAL: :class:`KafkaSourceFatalError`, naming the error code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin._listoffsets import OffsetSpec
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from connectors.kafka import _connect
from connectors.kafka._classify import classify
from txn import ErrorAction

from ._errors import KafkaSourceFatalError, KafkaUnavailableError, SourceOptionError
from ._offsets import TopicPartitionKey
from ._options import SourceOptions

__all__ = ["ClusterView"]

_log = logging.getLogger(__name__)

ADMIN_REQUEST_TIMEOUT_S = 30.0
"""Seconds for one admin request (metadata, ListOffsets, OffsetCommit) incl. retries inside
librdkafka; generous because brokers under load answer slowly."""
ADMIN_ATTEMPTS = 5
"""Attempts of a retriable admin call before giving up (bounded retry)."""
ADMIN_BACKOFF_MAX_S = 4.0
"""Upper bound (seconds) of the exponential backoff between admin attempts."""

_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

T = TypeVar("T")


def _is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and classify(exc) is ErrorAction.RETRY


class ClusterView:
    """Cluster metadata and offsets for one subscription, seen from the driver."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._admin: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options, "_admin": None}

    def _client(self) -> Any:
        if self._admin is None:
            try:
                self._admin = _connect.connect_admin(
                    self._options.admin_config(), setting="kafka.bootstrap.servers")
            except KafkaException as exc:
                msg = f"invalid Kafka client option (check the 'kafka.*' options): {exc}"
                raise SourceOptionError(msg) from exc
        return self._admin

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        retrying = Retrying(
            retry=retry_if_exception(_is_retriable),
            stop=stop_after_attempt(ADMIN_ATTEMPTS),
            wait=wait_exponential(multiplier=0.2, max=ADMIN_BACKOFF_MAX_S),
            reraise=True,
        )
        try:
            return retrying(fn)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            name = err.name() if isinstance(err, KafkaError) else repr(exc)
            if _is_retriable(exc):
                msg = (
                    f"{what}: Kafka kept failing with retriable {name} after {ADMIN_ATTEMPTS} tries"
                )
                raise KafkaUnavailableError(msg) from exc
            msg = f"{what}: non-retriable Kafka error {name}"
            raise KafkaSourceFatalError(msg) from exc

    def discover(self) -> list[TopicPartitionKey]:
        """Return the subscription's topic-partitions that exist now, sorted."""
        sub = self._options.subscription
        if sub.kind == "assign":
            return list(sub.partitions)

        def fetch() -> list[TopicPartitionKey]:
            md = self._client().list_topics(timeout=ADMIN_REQUEST_TIMEOUT_S)
            found: list[TopicPartitionKey] = []
            for name, topic in md.topics.items():
                if topic.error is None and sub.matches(name) and name not in _INTERNAL_TOPICS:
                    found.extend((name, p) for p in topic.partitions)
            return sorted(found)

        return self._call("discovering partitions", fetch)

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Log start offset of each partition."""
        return self._list_offsets(partitions, OffsetSpec.earliest(), "earliest")  # type: ignore[no-untyped-call]

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Latest readable offset: the last stable offset under read_committed (not the HW)."""
        return self._list_offsets(partitions, OffsetSpec.latest(), "latest")  # type: ignore[no-untyped-call]

    def _list_offsets(
        self, partitions: Iterable[TopicPartitionKey], spec: Any, label: str
    ) -> dict[TopicPartitionKey, int]:
        tps = sorted(set(partitions))
        if not tps:
            return {}
        level = (
            IsolationLevel.READ_COMMITTED
            if self._options.isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )

        def fetch() -> dict[TopicPartitionKey, int]:
            request = {TopicPartition(t, p): spec for t, p in tps}
            futures = self._client().list_offsets(
                request, isolation_level=level, request_timeout=ADMIN_REQUEST_TIMEOUT_S
            )
            return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}

        return self._call(f"listing {label} offsets of {len(tps)} partitions", fetch)

    def commit_group_offsets(self, group: str, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Store ``offsets`` as ``group``'s committed offsets (monitoring only, best effort).

        Failures are logged, never raised: Spark's checkpoint is the source of truth, and a
        lag dashboard must not be able to stop the query.
        """
        if not offsets:
            return
        request = [
            ConsumerGroupTopicPartitions(
                group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
            )
        ]

        def send() -> None:
            futures = self._client().alter_consumer_group_offsets(
                request, request_timeout=ADMIN_REQUEST_TIMEOUT_S
            )
            for fut in futures.values():
                for tp in fut.result().topic_partitions or []:
                    if tp.error is not None:
                        raise KafkaException(tp.error)

        try:
            self._call(f"committing offsets to group {group!r}", send)
        except (KafkaUnavailableError, KafkaSourceFatalError) as exc:
            _log.warning("kafka-rc: monitoring commit to group %r failed: %s", group, exc)
