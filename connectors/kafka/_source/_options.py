"""Option parsing: Spark's Kafka source options into a frozen, picklable dataclass.

The option names follow Spark's built-in ``kafka`` source so switching a query to this
source is a format change. Spark hands a Python data source its options with lower-cased
keys, so parsing is case-insensitive. Validation is pure: no network I/O happens here;
everything that needs the cluster (do the partitions exist?) is checked when offsets
are resolved.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from connectors._suggest import nearest_name
from connectors.kafka import _client
from connectors.kafka._client import Cluster, Settings
from connectors.kafka._errors import KafkaCode, KafkaConnectorError

from ._bounds import OffsetBound, ending_bound, starting_bound
from ._offsets import EARLIEST, LATEST, TopicPartitionKey

DEFAULT_POLL_TIMEOUT_MS = 120_000
"""Default ``kafkaConsumer.pollTimeoutMs`` (ms): how long a read task may see no progress
before failing; Spark's built-in source defaults to the 120 s network timeout too."""
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
"""Default ``maxTriggerDelay`` (ms), Spark's 15m: the longest ``minOffsetsPerTrigger`` may
hold back a micro-batch while some data is available."""
DEFAULT_CONSUMER_CACHE_CAPACITY = 64
"""Default ``kafkaConsumer.cache.capacity``: idle consumers a Python worker keeps for reuse
(Spark's consumer cache capacity); 0 opens a consumer per read task."""
SPARK_FETCH_RETRIES = 3
"""``fetchOffset.numRetries`` when only ``fetchOffset.retryIntervalMs`` is given (Spark's)."""
SPARK_FETCH_RETRY_INTERVAL_MS = 10
"""``fetchOffset.retryIntervalMs`` when only ``fetchOffset.numRetries`` is given (Spark's)."""

_KAFKA_PREFIX = "kafka."
# The option that holds the cluster's address (Spark's name: the prefix and librdkafka's).
BOOTSTRAP_OPTION = _KAFKA_PREFIX + _client.BOOTSTRAP
# How errors name the settings every client of the source gets (security, client.id, ...).
CLIENT_OPTIONS = "the 'kafka.*' options"
# Settings of consumers only, dropped from the driver's AdminClient (prefixes).
_CONSUMER_ONLY = ("isolation.level", "group.id", "fetch.", "queued.", "session.timeout")

OPTION_NAMES = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "kafkaConsumer.pollTimeoutMs",
    "kafkaConsumer.cache.capacity",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "groupIdPrefix",
    "commitOffsetsToGroup",
)
"""The source's options besides ``kafka.*``, as Spark's Kafka source spells them
(docs/kafka-source.md, "Options", lists exactly these; a test checks it)."""
# Lower-cased (as Spark passes them) to the name users write.
_KNOWN = {name.lower(): name for name in OPTION_NAMES}
# The options that end a batch read, each rejected in a stream.
_ENDING_OPTIONS = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
# maxTriggerDelay's units (Spark's time strings) in milliseconds; no unit means ms.
_DURATION_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_DURATION_UNITS_MS["d"] = 24 * _DURATION_UNITS_MS["h"]
_DURATION = re.compile(r"(\d+)\s*([a-z]*)")

# Kafka client properties the source manages itself; each maps to what to use instead.
_MANAGED_KAFKA = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "offsets are tracked by Spark's checkpoint; see 'commitOffsetsToGroup'",
    "enable.auto.offset.store": "offsets are tracked by Spark's checkpoint",
    "enable.partition.eof": "the source manages end-of-partition detection",
    "key.deserializer": "keys are always returned as binary; cast or decode in the query",
    "value.deserializer": "values are always returned as binary; cast or decode in the query",
    "interceptor.classes": "Java interceptors do not exist in librdkafka",
}

_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


@dataclass(frozen=True, kw_only=True)
class Subscription:
    """Which topic-partitions to read: exactly one of the three Spark strategies."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartitionKey, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to a subscribe / subscribePattern subscription."""
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class OffsetFetchRetry:
    """Spark's bounds of the driver's offset lookups: ``attempts``, ``interval_ms`` apart.

    From ``fetchOffset.numRetries`` (the number of attempts, as Spark counts it) and
    ``fetchOffset.retryIntervalMs``; without either, the source waits out transient errors
    for ``UNAVAILABLE_WAIT_S`` instead (docs/kafka-source.md, "Broker outages and restarts").
    """

    attempts: int
    interval_ms: int

    @classmethod
    def from_options(cls, opts: Mapping[str, str]) -> OffsetFetchRetry | None:
        """Return the bounds given in lower-cased ``opts``, or None when neither option is."""
        attempts = _opt_int(opts, "fetchOffset.numRetries")
        interval = _opt_int(opts, "fetchOffset.retryIntervalMs", minimum=0)
        if attempts is None and interval is None:
            return None
        return cls(
            SPARK_FETCH_RETRIES if attempts is None else attempts,
            SPARK_FETCH_RETRY_INTERVAL_MS if interval is None else interval,
        )


@dataclass(frozen=True, kw_only=True)
class SourceOptions:
    """Validated options of the source; frozen and picklable (sent to every read task).

    ``kafka_config``: the ``kafka.*`` options without the prefix (and without the
    address); every client of the source gets them (its read tasks' consumers and the
    driver's AdminClient, which drops the consumer-only ones). Secret values are hidden
    in the repr.
    """

    bootstrap_servers: str
    subscription: Subscription
    kafka_config: Settings = Settings()
    starting_offsets: OffsetBound | None = None
    ending_offsets: OffsetBound | None = None
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    group_id_prefix: str = "spark-kafka-rc"
    commit_offsets_to_group: str | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_records_per_partition: int | None = None
    fetch_retry: OffsetFetchRetry | None = None
    consumer_cache_capacity: int = DEFAULT_CONSUMER_CACHE_CAPACITY

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark reader options (any key case) into a :class:`SourceOptions`.

        Raises:
            KafkaCode.SOURCE_OPTION: unknown, malformed or conflicting options; the message
                names the option and what to change.

        """
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        kafka_config = _kafka_passthrough(opts)
        _reject_unknown(opts)
        bootstrap = kafka_config.pop(_client.BOOTSTRAP, "").strip()
        if not bootstrap:
            msg = f"option {BOOTSTRAP_OPTION!r} is required (e.g. 'host1:9092,host2:9092')"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        subscription = _parse_subscription(opts)
        starting, ending = starting_bound(opts), ending_bound(opts)
        for bound in (starting, ending):
            _check_bound_subscription(bound, subscription)
        return cls(
            bootstrap_servers=bootstrap,
            subscription=subscription,
            kafka_config=Settings.of(kafka_config),
            starting_offsets=starting,
            ending_offsets=ending,
            max_offsets_per_trigger=_opt_int(opts, "maxOffsetsPerTrigger"),
            min_partitions=_opt_int(opts, "minPartitions"),
            fail_on_data_loss=_opt_bool(opts, "failOnDataLoss", default=True),
            include_headers=_opt_bool(opts, "includeHeaders", default=False),
            poll_timeout_ms=_opt_int(opts, "kafkaConsumer.pollTimeoutMs")
            or DEFAULT_POLL_TIMEOUT_MS,
            group_id_prefix=opts.get("groupidprefix", "spark-kafka-rc").strip() or "spark-kafka-rc",
            commit_offsets_to_group=_opt_group(opts),
            min_offsets_per_trigger=_min_offsets(opts),
            max_trigger_delay_ms=_max_trigger_delay_ms(opts),
            max_records_per_partition=_opt_int(opts, "maxRecordsPerPartition"),
            fetch_retry=OffsetFetchRetry.from_options(opts),
            consumer_cache_capacity=_cache_capacity(opts),
        )

    @property
    def isolation_level(self) -> str:
        """``read_committed`` unless ``kafka.isolation.level`` says otherwise."""
        return self.kafka_config.get("isolation.level") or "read_committed"

    def stream_starting(self) -> OffsetBound:
        """Validate for a streaming query and return its starting bound (default latest).

        Raises:
            KafkaCode.SOURCE_OPTION: an ending bound was given (it has no meaning in streaming).

        """
        if self.ending_offsets is not None:
            msg = (
                f"option {self.ending_offsets.option or 'endingOffsets'!r} is only valid for "
                "batch reads (spark.read), not streams"
            )
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        return self.starting_offsets or OffsetBound(kind="latest")

    def batch_bounds(self) -> tuple[OffsetBound, OffsetBound]:
        """Validate for a batch query; return (starting, ending), defaults earliest/latest.

        Raises:
            KafkaCode.SOURCE_OPTION: starting at latest or ending at earliest (Spark rejects both).

        """
        start = self.starting_offsets or OffsetBound(kind="earliest")
        end = self.ending_offsets or OffsetBound(kind="latest")
        if start.kind == "latest" or start.has_sentinel(LATEST):
            msg = (
                "batch reads cannot use 'latest' (-1) in 'startingOffsets'; use earliest or offsets"
            )
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        if end.kind == "earliest" or end.has_sentinel(EARLIEST):
            msg = "batch reads cannot use 'earliest' (-2) in 'endingOffsets'; use latest or offsets"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        return start, end

    def consumer_cluster(self, *, admin: bool = False) -> Cluster:
        """Return the cluster as a read task's consumer reaches it (every ``kafka.*`` option).

        ``admin``: as the driver's AdminClient reaches it (the consumer-only ones dropped).
        """
        items = self.kafka_config.items
        if admin:
            items = tuple(i for i in items if not i[0].startswith(_CONSUMER_ONLY))
        where = {"address_option": BOOTSTRAP_OPTION, "config_option": CLIENT_OPTIONS}
        return Cluster(bootstrap_servers=self.bootstrap_servers, config=Settings(items), **where)

    def consumer_config(self, group_id: str) -> dict[str, str]:
        """Return a range reader's own consumer settings (it never joins or commits).

        A ``kafka.group.id`` option wins over ``group_id``; the cluster's settings come
        from :meth:`consumer_cluster` through the client factory.
        """
        return {
            "group.id": self.kafka_config.get("group.id") or group_id,
            "isolation.level": self.isolation_level,
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            "auto.offset.reset": "error",
        }


def _kafka_passthrough(opts: dict[str, str]) -> dict[str, str]:
    config: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith(_KAFKA_PREFIX):
            continue
        prop = key[len(_KAFKA_PREFIX) :]
        if prop in _MANAGED_KAFKA:
            msg = f"Kafka option 'kafka.{prop}' is not supported: {_MANAGED_KAFKA[prop]}"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        if prop == "isolation.level" and value not in _ISOLATION_LEVELS:
            msg = f"'kafka.isolation.level' must be one of {_ISOLATION_LEVELS}, got {value!r}"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        config[prop] = value
    return config


def _reject_unknown(opts: dict[str, str]) -> None:
    for key in sorted(opts):
        if key.startswith(_KAFKA_PREFIX) or key in _KNOWN:
            continue
        near = nearest_name(key, OPTION_NAMES)
        if near is not None:
            msg = f"unknown option {key!r}: did you mean {near!r}?"
        else:
            msg = (
                f"unknown option {key!r}; Kafka client properties need the 'kafka.' prefix "
                f"(e.g. 'kafka.{key}'); the source's own options are {', '.join(OPTION_NAMES)}"
            )
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)


def _parse_subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        what = "none" if not given else ", ".join(given)
        msg = f"exactly one of 'subscribe', 'subscribePattern', 'assign' is required (got {what})"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    kind, value = given[0], opts[given[0]].strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(","))
        if not value or not all(topics):
            msg = f"'subscribe' must be a comma-separated list of topic names, got {value!r}"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        return Subscription(kind="subscribe", topics=tuple(dict.fromkeys(topics)))
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as exc:
            msg = f"'subscribePattern' is not a valid regular expression: {value!r} ({exc})"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION) from exc
        if not value:
            msg = "'subscribePattern' must not be empty"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        return Subscription(kind="subscribePattern", pattern=value)
    return Subscription(kind="assign", partitions=_parse_assign(value))


def _parse_assign(value: str) -> tuple[TopicPartitionKey, ...]:
    shape = '\'assign\' must be JSON like {"topicA": [0, 1], "topicB": [2]}'
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as exc:
        msg = f"{shape}; not valid JSON: {value!r}"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION) from exc
    if not isinstance(obj, dict) or not obj:
        msg = f"{shape}, got {value!r}"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    parts: set[TopicPartitionKey] = set()
    for topic, plist in obj.items():
        ok = isinstance(plist, list) and all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in plist
        )
        if not topic or not ok or not plist:
            msg = f"{shape}; bad entry {topic!r}: {plist!r}"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        parts.update((topic, p) for p in plist)
    return tuple(sorted(parts))


def _check_bound_subscription(bound: OffsetBound | None, subscription: Subscription) -> None:
    """Per-partition JSON must stay inside the subscription (checked again against the cluster)."""
    if bound is None or not bound.by_partition:
        return
    name = bound.option
    if subscription.kind == "assign":
        given, wanted = bound.offsets.partitions(), frozenset(subscription.partitions)
        if given != wanted:
            msg = (
                f"{name!r} must name exactly the assigned partitions; "
                f"missing {sorted(wanted - given)}, not assigned {sorted(given - wanted)}"
            )
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
        return
    stray = sorted(t for t in bound.offsets.topics() if not subscription.matches(t))
    if stray:
        msg = f"{name!r} names topics outside the subscription: {stray}"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)


def _opt_int(opts: Mapping[str, str], name: str, *, minimum: int = 1) -> int | None:
    text = opts.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        msg = f"option {name!r} must be {what}, got {text!r}"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    return value


def _max_trigger_delay_ms(opts: Mapping[str, str]) -> int:
    """Return ``maxTriggerDelay``, a Spark time string (``15m``, ``500ms``, ``500``: ms), in ms."""
    name = "maxTriggerDelay"
    text = opts.get(name.lower())
    if text is None:
        return DEFAULT_MAX_TRIGGER_DELAY_MS
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in {"", *_DURATION_UNITS_MS}:
        msg = (
            f"option {name!r} takes a duration such as '15m', '30s' or '500ms' (units "
            f"{', '.join(_DURATION_UNITS_MS)}; a number alone is milliseconds), got {text!r}"
        )
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    return int(int(match.group(1)) * _DURATION_UNITS_MS.get(match.group(2), 1))


def _cache_capacity(opts: Mapping[str, str]) -> int:
    capacity = _opt_int(opts, "kafkaConsumer.cache.capacity", minimum=0)
    return DEFAULT_CONSUMER_CACHE_CAPACITY if capacity is None else capacity


def _min_offsets(opts: Mapping[str, str]) -> int | None:
    low = _opt_int(opts, "minOffsetsPerTrigger")
    high = _opt_int(opts, "maxOffsetsPerTrigger")
    if low is not None and high is not None and low > high:
        msg = (
            f"option 'minOffsetsPerTrigger' ({low}) is higher than 'maxOffsetsPerTrigger' "
            f"({high}); lower it or raise the maximum"
        )
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    return low


def _opt_bool(opts: dict[str, str], name: str, *, default: bool) -> bool:
    text = opts.get(name.lower())
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        msg = f"option {name!r} must be 'true' or 'false', got {text!r}"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    return lowered == "true"


def _opt_group(opts: dict[str, str]) -> str | None:
    text = opts.get("commitoffsetstogroup")
    if text is None:
        return None
    group = text.strip()
    if not group or group.lower() in ("true", "false"):
        msg = (
            "option 'commitOffsetsToGroup' takes the consumer group id to commit offsets to "
            f"(for lag monitoring), got {text!r}"
        )
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    return group
