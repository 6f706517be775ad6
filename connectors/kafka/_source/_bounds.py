"""Where a read starts and ends: offsets, or timestamps resolved by the cluster.

Spark's Kafka source takes a starting bound from the first of ``startingTimestamp``,
``startingOffsetsByTimestamp`` and ``startingOffsets`` that is given, and an ending bound
(batch reads) from the first of ``endingTimestamp``, ``endingOffsetsByTimestamp`` and
``endingOffsets``. A timestamp resolves, per partition, to the earliest offset whose record
timestamp is at or after it (Kafka's ListOffsets by timestamp, the driver's admin client).
When a partition has no such record (readable at the reader's isolation level), a
starting bound follows ``startingOffsetsByTimestampStrategy`` (``error``: the query fails
naming the partitions; ``latest``: the partition starts at its latest offset) and an
ending bound takes the latest offset. Parsing here is pure; resolving is the driver's
(``_source.resolve_bound``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from connectors.kafka._errors import KafkaCode, KafkaConnectorError

from ._offsets import KafkaOffsets

BoundKind = Literal["earliest", "latest", "specific", "timestamp"]
NoMatch = Literal["error", "latest"]

NO_MATCH_STRATEGIES: tuple[NoMatch, ...] = ("error", "latest")
"""Values of ``startingOffsetsByTimestampStrategy`` (Spark's; ``error`` is the default)."""
STRATEGY_OPTION = "startingOffsetsByTimestampStrategy"


@dataclass(frozen=True, kw_only=True)
class OffsetBound:
    """A starting or ending bound: earliest, latest, specific offsets, or timestamps.

    ``specific`` offsets may contain the sentinels -2 (earliest) and -1 (latest).
    ``timestamp``: ``timestamp`` (ms) for every partition, or, when it is None, one
    timestamp per partition in ``offsets``; ``no_match`` says what a partition without a
    record at or after its timestamp gets. ``option`` names the option the bound came from.
    """

    kind: BoundKind
    offsets: KafkaOffsets = field(default_factory=KafkaOffsets)
    timestamp: int | None = field(default=None, kw_only=True)
    no_match: NoMatch = field(default="error", kw_only=True)
    option: str = field(default="", kw_only=True)

    @classmethod
    def parse(cls, option: str, text: str) -> OffsetBound:
        """Parse ``earliest``, ``latest`` or a per-partition JSON object."""
        value = text.strip()
        if value.lower() in ("earliest", "latest"):
            kind: BoundKind = "earliest" if value.lower() == "earliest" else "latest"
            return cls(kind=kind, option=option)
        if value.startswith("{"):
            return cls(
                kind="specific",
                offsets=_partition_json(option, value, sentinels=True),
                option=option,
            )
        msg = f"{option}: expected 'earliest', 'latest' or JSON like {{\"t\": {{\"0\": 5}}}}, got {text!r}"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)

    def has_sentinel(self, sentinel: int) -> bool:
        """Whether specific offsets use ``sentinel`` (EARLIEST or LATEST) anywhere."""
        return self.kind == "specific" and any(o == sentinel for _, _, o in self.offsets)

    @property
    def by_partition(self) -> bool:
        """Whether the bound names its partitions (specific offsets or per-partition times)."""
        return self.kind == "specific" or (self.kind == "timestamp" and self.timestamp is None)


def starting_bound(opts: Mapping[str, str]) -> OffsetBound | None:
    """Return the starting bound of lower-cased ``opts`` (module docstring), None if unset."""
    text = opts.get(STRATEGY_OPTION.lower(), "error").strip().lower()
    if text not in NO_MATCH_STRATEGIES:
        msg = f"option {STRATEGY_OPTION!r} must be one of {NO_MATCH_STRATEGIES}, got {text!r}"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    strategy: NoMatch = "latest" if text == "latest" else "error"
    return _bound(opts, "starting", strategy)


def ending_bound(opts: Mapping[str, str]) -> OffsetBound | None:
    """Return the ending bound of lower-cased ``opts`` (no match: latest), None if unset."""
    return _bound(opts, "ending", "latest")


def _bound(opts: Mapping[str, str], side: str, no_match: NoMatch) -> OffsetBound | None:
    single, by_partition, offsets = (
        f"{side}Timestamp",
        f"{side}OffsetsByTimestamp",
        f"{side}Offsets",
    )
    if single.lower() in opts:
        ts = _timestamp(single, opts[single.lower()])
        return OffsetBound(kind="timestamp", timestamp=ts, no_match=no_match, option=single)
    if by_partition.lower() in opts:
        times = _partition_json(by_partition, opts[by_partition.lower()], sentinels=False)
        return OffsetBound(kind="timestamp", offsets=times, no_match=no_match, option=by_partition)
    text = opts.get(offsets.lower())
    return None if text is None else OffsetBound.parse(offsets, text)


def _timestamp(option: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        msg = (
            f"option {option!r} takes a timestamp in milliseconds since the epoch "
            f"(an integer >= 0, e.g. '1700000000000'), got {text!r}"
        )
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    return value


def _partition_json(option: str, value: str, *, sentinels: bool) -> KafkaOffsets:
    found = KafkaOffsets.from_json(value.strip(), option=option, allow_sentinels=sentinels)
    if not found.entries:
        msg = f"{option}: the JSON object names no topic-partition"
        raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
    return found
