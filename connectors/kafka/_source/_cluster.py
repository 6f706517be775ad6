"""Driver side: partition discovery, offset lookups and monitoring commits.

One :class:`ClusterView` per reader; its AdminClient is created lazily on first use (never
at construction, never pickled), so readers stay cheap to build and to ship to tasks.

A transient error is never a smaller answer. Every lookup runs inside one bounded retry
(tenacity, :data:`UNAVAILABLE_WAIT_S`):

1. a retriable Kafka error, or a subscribed topic answered with a transient error
   (``_metadata.read_metadata``), is retried; when it persists for the whole bound the
   lookup fails with :class:`KafkaCode.UNAVAILABLE` naming the bootstrap address;
2. an error-free answer that lacks something the caller expects (a partition the query
   read before, an explicitly subscribed topic, any topic at all, or that reports a
   latest offset below one already read) is retried too, and believed only when every
   error-free answer says the same for :data:`GONE_CONFIRM_S`; an error in between
   starts that interval again;
3. a non-retriable error raises :class:`KafkaCode.SOURCE_FATAL`, naming the error code.

An attempt that failed with what may be the AdminClient's stale "Unknown topic" verdict
after a broker restart (``stale_topic_verdict``, issue 38) is retried with a new
AdminClient, within the same bound.

With ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs`` (Spark's bounds,
:class:`~._options.OffsetFetchRetry`) a lookup makes at most that many attempts that fail
with an error, that interval apart, within the same overall bound; answers that only lack
something (2.) are still confirmed over :data:`GONE_CONFIRM_S`, not counted as attempts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin._listoffsets import OffsetSpec
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from connectors.kafka import _client
from connectors.kafka._client import (
    TOPIC_METADATA_WAIT_S,
    access_error,
    kafka_error_of,
    stale_topic_verdict,
)
from connectors.kafka._errors import KafkaCode, KafkaConnectorError

from ._metadata import MetadataView, is_transient, read_metadata
from ._offsets import TopicPartitionKey
from ._options import BOOTSTRAP_OPTION, CLIENT_OPTIONS, OffsetFetchRetry, SourceOptions

_log = logging.getLogger(__name__)

ADMIN_REQUEST_TIMEOUT_S = 30.0
"""Seconds for one admin request (metadata, ListOffsets, OffsetCommit) incl. retries inside
librdkafka; generous because brokers under load answer slowly."""
ADMIN_BACKOFF_MAX_S = 2.0
"""Upper bound (seconds) of the exponential backoff between two attempts of a lookup."""
UNAVAILABLE_WAIT_S = 90.0
"""Seconds a lookup retries transient errors (broker down, restarting, loading its topics)
before the batch fails with KafkaCode.UNAVAILABLE: a restarted broker normally answers
within a minute; longer is an outage the user must see. One request in flight may add
up to ADMIN_REQUEST_TIMEOUT_S."""
GONE_CONFIRM_S = TOPIC_METADATA_WAIT_S
"""Seconds error-free metadata must consistently lack a partition the query read (or report
its offsets lower) before it is believed gone: a restarted Kafka broker can answer Metadata
before it has loaded its topics. The sink's preflight waits for topics the same time."""

MONITOR_COMMIT_WAIT_S = 10.0
"""Seconds the monitoring commit (commitOffsetsToGroup) retries: best effort, so it must not
hold up the next batch for long."""

T = TypeVar("T")
Offsets = dict[TopicPartitionKey, int]


class _NotSettled(Exception):
    """An answer that cannot be believed yet; raised and caught inside the retry loop only."""

    def __init__(self, reason: str, *, errors: bool) -> None:
        super().__init__(reason)
        self.errors = errors


def _should_retry(exc: BaseException) -> bool:
    if isinstance(exc, _NotSettled):
        return True
    return isinstance(exc, KafkaException) and (is_transient(exc) or stale_topic_verdict(exc))


def _failed_with_error(state: RetryCallState) -> bool:
    """Whether an attempt failed with an error (not an answer that only lacked something)."""
    exc = state.outcome.exception() if state.outcome is not None else None
    return not (isinstance(exc, _NotSettled) and not exc.errors)


class _SparkBounds:
    """Tenacity's stop and wait under ``fetchOffset.*``: errors count, doubts wait longer."""

    def __init__(self, bounds: OffsetFetchRetry) -> None:
        self._bounds = bounds
        self._errors = 0
        self._backoff = wait_exponential(multiplier=0.2, max=ADMIN_BACKOFF_MAX_S)

    def stop(self, state: RetryCallState) -> bool:
        if _failed_with_error(state):
            self._errors += 1
        return self._errors >= self._bounds.attempts

    def wait(self, state: RetryCallState) -> float:
        if _failed_with_error(state):
            return self._bounds.interval_ms / 1000.0
        return float(self._backoff(state))


class _Confirmation:
    """How long error-free answers have consistently lacked what was expected."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.since: float | None = None

    def error(self, reason: str) -> _NotSettled:
        """Return the exception of an answer with errors; the interval starts again."""
        self.since = None
        return _NotSettled(reason, errors=True)

    def check(self, doubts: list[str]) -> None:
        """Raise :class:`_NotSettled` unless ``doubts`` is empty or held for the window."""
        if not doubts:
            return
        now = time.monotonic()
        if self.since is None:
            self.since = now
        if now - self.since < self.window_s:
            raise _NotSettled("; ".join(doubts), errors=False)
        _log.warning(
            "kafka-rc: believing metadata after %.0fs of consistent answers: %s",
            now - self.since,
            "; ".join(doubts),
        )


class ClusterView:
    """Cluster metadata and offsets for one subscription, seen from the driver."""

    def __init__(
        self,
        options: SourceOptions,
        *,
        unavailable_wait_s: float = UNAVAILABLE_WAIT_S,
        gone_confirm_s: float = GONE_CONFIRM_S,
    ) -> None:
        self._options = options
        self._admin: Any = None
        self._unavailable_wait_s = unavailable_wait_s
        self._gone_confirm_s = gone_confirm_s
        self._absent: frozenset[str] = frozenset()  # subscribed topics confirmed absent
        self._empty_confirmed = False  # an empty cluster confirmed for this view

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    def _client(self) -> Any:
        if self._admin is None:
            try:
                self._admin = _client.connect_admin(self._options.consumer_cluster(admin=True))
            except KafkaException as exc:
                msg = f"invalid Kafka client option (check the 'kafka.*' options): {exc}"
                raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION) from exc
        return self._admin

    def _call(self, what: str, fn: Callable[[], T], *, wait_s: float | None = None) -> T:
        stop: Any = stop_after_delay(self._unavailable_wait_s if wait_s is None else wait_s)
        wait: Any = wait_exponential(multiplier=0.2, max=ADMIN_BACKOFF_MAX_S)
        if self._options.fetch_retry is not None and wait_s is None:
            bounds = _SparkBounds(self._options.fetch_retry)
            stop, wait = stop | bounds.stop, bounds.wait
        retrying = Retrying(
            retry=retry_if_exception(_should_retry), stop=stop, wait=wait, reraise=True
        )
        try:
            return retrying(lambda: self._attempt(fn))
        except _NotSettled as exc:
            raise KafkaConnectorError(
                self._unavailable(what, str(exc)), code=KafkaCode.UNAVAILABLE
            ) from exc
        except KafkaException as exc:
            err = kafka_error_of(exc)
            name = err.name() if err is not None else repr(exc)
            if is_transient(exc):
                raise KafkaConnectorError(
                    self._unavailable(what, name), code=KafkaCode.UNAVAILABLE
                ) from exc
            denied = access_error(exc, what, CLIENT_OPTIONS)
            msg = str(denied) if denied is not None else f"{what}: non-retriable Kafka error {name}"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_FATAL) from exc

    def _attempt(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; after a stale topic verdict, the next attempt gets a new AdminClient."""
        try:
            return fn()
        except KafkaException as exc:
            if stale_topic_verdict(exc):
                self._admin = None
            raise

    def _unavailable(self, what: str, reason: str) -> str:
        return (
            f"{what}: the Kafka broker at {self._options.bootstrap_servers} is unavailable "
            f"({reason}) and stayed so for {self._unavailable_wait_s:.0f}s; the batch fails "
            "and a restarted query resumes from its checkpoint. Check that the brokers of "
            f"{BOOTSTRAP_OPTION!r} run, are reachable and have loaded their topics."
        )

    def discover(self, expected: Iterable[TopicPartitionKey] = ()) -> list[TopicPartitionKey]:
        """Return the subscription's topic-partitions that exist now, sorted.

        The topics of ``expected`` partitions (named in the user's offsets) missing from the
        answer are waited for as the module docstring says; a listed topic without such a
        partition is taken as it is (the caller reports the unknown partition).
        """
        want = dict.fromkeys(expected, 0)
        return sorted(self._settle("discovering partitions", want, with_offsets=False))

    def settled_latest(self, expected: Mapping[TopicPartitionKey, int]) -> Offsets:
        """Latest offsets of every partition that exists now (see :meth:`latest`).

        Contract: every partition of ``expected`` is in the result with an offset at least
        its expected one, unless error-free answers said otherwise for
        :data:`GONE_CONFIRM_S` (the partition is then missing, or lower: data loss).

        Raises:
            KafkaCode.UNAVAILABLE: transient errors for :data:`UNAVAILABLE_WAIT_S`.
            KafkaCode.SOURCE_FATAL: a non-retriable error.

        """
        return self._settle("looking up the latest offsets", dict(expected), with_offsets=True)

    def _settle(self, what: str, expected: Offsets, *, with_offsets: bool) -> Offsets:
        confirm = _Confirmation(self._gone_confirm_s)

        def attempt() -> Offsets:
            try:
                return self._answer(expected, confirm, with_offsets=with_offsets)
            except KafkaException as exc:
                if is_transient(exc):
                    confirm.error(str(exc))
                raise

        return self._call(what, attempt)

    def _answer(self, expected: Offsets, confirm: _Confirmation, *, with_offsets: bool) -> Offsets:
        view = self._metadata()
        if view.not_ready:
            detail = ", ".join(f"{t} {code}" for t, code in view.not_ready)
            msg = f"metadata answered with errors for {detail}"
            raise confirm.error(msg)
        found = dict.fromkeys(view.partitions, 0)
        if with_offsets:
            doubts = [f"partition {t}-{p} is missing" for t, p in expected if (t, p) not in found]
        else:  # user-named partitions: wait for their topics, not for partitions never made
            listed = {t for t, _ in found}
            topics = sorted({t for t, _ in expected} - listed)
            doubts = [f"topic {t} named in the offsets is missing" for t in topics]
        doubts += [
            f"subscribed topic {t} is not in the metadata"
            for t in view.absent
            if t not in self._absent
        ]
        if view.empty and not self._empty_confirmed:
            doubts.append("the metadata lists no topic at all")
        if with_offsets and found:
            found = self._list_offsets_once(found, OffsetSpec.latest())  # type: ignore[no-untyped-call]
            doubts += [
                f"latest offset of {t}-{p} is {o}, below {expected[(t, p)]} already read"
                for (t, p), o in sorted(found.items())
                if o < expected.get((t, p), 0)
            ]
        confirm.check(doubts)
        self._absent, self._empty_confirmed = frozenset(view.absent), view.empty
        return found

    def _metadata(self) -> MetadataView:
        sub = self._options.subscription
        if sub.kind == "assign":
            return MetadataView(
                partitions=tuple(sorted(set(sub.partitions))), not_ready=(), absent=(), empty=False
            )
        return read_metadata(self._client().list_topics(timeout=ADMIN_REQUEST_TIMEOUT_S), sub)

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Log start offset of each partition."""
        return self._list_offsets(partitions, OffsetSpec.earliest(), "earliest")  # type: ignore[no-untyped-call]

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Latest readable offset: the last stable offset under read_committed (not the HW)."""
        return self._list_offsets(partitions, OffsetSpec.latest(), "latest")  # type: ignore[no-untyped-call]

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, int | None]:
        """Return the earliest offset whose record's timestamp is at or after the given one (ms).

        None for a partition without such a record readable at the source's isolation
        level (Kafka's ListOffsets by timestamp; the caller compares with :meth:`latest`).
        """
        specs = {tp: OffsetSpec.for_timestamp(ts) for tp, ts in sorted(timestamps.items())}
        if not specs:
            return {}
        found = self._call(
            f"looking up the offsets of timestamps in {len(specs)} partitions",
            lambda: self._list_specs_once(specs),
        )
        return {tp: (o if o >= 0 else None) for tp, o in found.items()}

    def _list_offsets(
        self, partitions: Iterable[TopicPartitionKey], spec: Any, label: str
    ) -> dict[TopicPartitionKey, int]:
        tps = sorted(set(partitions))
        if not tps:
            return {}
        return self._call(
            f"listing {label} offsets of {len(tps)} partitions",
            lambda: self._list_offsets_once(tps, spec),
        )

    def _list_offsets_once(
        self, partitions: Iterable[TopicPartitionKey], spec: Any
    ) -> dict[TopicPartitionKey, int]:
        return self._list_specs_once(dict.fromkeys(partitions, spec))

    def _list_specs_once(
        self, specs: Mapping[TopicPartitionKey, Any]
    ) -> dict[TopicPartitionKey, int]:
        level = (
            IsolationLevel.READ_COMMITTED
            if self._options.isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        request = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        futures = self._client().list_offsets(
            request, isolation_level=level, request_timeout=ADMIN_REQUEST_TIMEOUT_S
        )
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}

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
            self._call(f"committing offsets to group {group!r}", send, wait_s=MONITOR_COMMIT_WAIT_S)
        except KafkaConnectorError as exc:
            if exc.code not in (KafkaCode.UNAVAILABLE, KafkaCode.SOURCE_FATAL):
                raise
            _log.warning("kafka-rc: monitoring commit to group %r failed: %s", group, exc)
