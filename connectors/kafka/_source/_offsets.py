"""Offsets per topic-partition, in the JSON shape of Spark's built-in Kafka source.

The JSON form is ``{"topic": {"0": 23, "1": 42}}``: topic name, then partition number as a
string, then the offset. In user-supplied offsets ``-2`` means "earliest" and ``-1`` means
"latest" (last stable offset under read_committed). Offsets produced by the source itself
(checkpointed by Spark) are always concrete (>= 0).

Contract: :meth:`KafkaOffsets.to_json_dict` is canonical (topics sorted by name,
partitions sorted numerically), so two equal offset sets always serialize to the same
JSON string; Spark compares checkpointed offsets by their JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from connectors.kafka._errors import KafkaCode, KafkaConnectorError

EARLIEST = -2
"""Sentinel offset meaning "the earliest available offset" in user-supplied JSON."""
LATEST = -1
"""Sentinel offset meaning "the latest (last stable) offset" in user-supplied JSON."""

TopicPartitionKey = tuple[str, int]
"""A topic-partition as a ``(topic, partition)`` pair."""


@dataclass(frozen=True)
class KafkaOffsets:
    """An immutable, picklable map from topic-partition to offset.

    Stored as a sorted tuple of ``(topic, partition, offset)`` so instances hash, compare
    and pickle by value.
    """

    entries: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def from_mapping(cls, offsets: Mapping[TopicPartitionKey, int]) -> KafkaOffsets:
        """Build from a ``{(topic, partition): offset}`` mapping."""
        return cls(tuple(sorted((t, p, int(o)) for (t, p), o in offsets.items())))

    def as_dict(self) -> dict[TopicPartitionKey, int]:
        """Return a fresh ``{(topic, partition): offset}`` dict."""
        return {(t, p): o for t, p, o in self.entries}

    def __iter__(self) -> Iterator[tuple[str, int, int]]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def partitions(self) -> frozenset[TopicPartitionKey]:
        """Return the set of topic-partitions present."""
        return frozenset((t, p) for t, p, _ in self.entries)

    def topics(self) -> frozenset[str]:
        """Return the set of topics present."""
        return frozenset(t for t, _, _ in self.entries)

    def to_json_dict(self) -> dict[str, dict[str, int]]:
        """Canonical JSON-compatible dict ``{"topic": {"0": offset}}``."""
        out: dict[str, dict[str, int]] = {}
        for topic, partition, offset in self.entries:
            out.setdefault(topic, {})[str(partition)] = offset
        return out

    def to_json(self) -> str:
        """Canonical JSON text of :meth:`to_json_dict`."""
        return json.dumps(self.to_json_dict(), separators=(",", ":"))

    @classmethod
    def from_json_dict(
        cls, obj: Any, *, option: str = "offsets", allow_sentinels: bool = False
    ) -> KafkaOffsets:
        """Parse and validate ``{"topic": {"0": offset}}``.

        Args:
            obj: the decoded JSON value.
            option: name used in error messages (the option or field being parsed).
            allow_sentinels: accept ``-2`` (earliest) and ``-1`` (latest) as offsets.

        Raises:
            KafkaCode.SOURCE_OPTION: the value is not of the expected shape.

        """
        if not isinstance(obj, dict):
            raise KafkaConnectorError(
                _shape_msg(option, f"top level is {type(obj).__name__}"),
                code=KafkaCode.SOURCE_OPTION,
            )
        result: dict[TopicPartitionKey, int] = {}
        lowest = EARLIEST if allow_sentinels else 0
        for topic, parts in obj.items():
            if not isinstance(topic, str) or not topic:
                raise KafkaConnectorError(
                    _shape_msg(option, f"bad topic name {topic!r}"), code=KafkaCode.SOURCE_OPTION
                )
            if not isinstance(parts, dict):
                raise KafkaConnectorError(
                    _shape_msg(option, f"topic {topic!r} maps to {parts!r}"),
                    code=KafkaCode.SOURCE_OPTION,
                )
            for part, offset in parts.items():
                partition = _parse_partition(part, option, topic)
                if isinstance(offset, bool) or not isinstance(offset, int):
                    msg = f"{option}: offset of {topic}-{partition} must be an integer, got {offset!r}"
                    raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
                if offset < lowest:
                    allowed = ">= 0, or -2 (earliest) / -1 (latest)" if allow_sentinels else ">= 0"
                    msg = f"{option}: offset of {topic}-{partition} is {offset}; allowed: {allowed}"
                    raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)
                result[(topic, partition)] = offset
        return cls.from_mapping(result)

    @classmethod
    def from_json(
        cls, text: str, *, option: str = "offsets", allow_sentinels: bool = False
    ) -> KafkaOffsets:
        """Parse JSON text; see :meth:`from_json_dict`."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"{option}: not valid JSON ({exc.msg} at char {exc.pos}): {text!r}"
            raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION) from exc
        return cls.from_json_dict(obj, option=option, allow_sentinels=allow_sentinels)


def _parse_partition(part: object, option: str, topic: str) -> int:
    if isinstance(part, str) and part.isdigit():
        return int(part)
    msg = f"{option}: partition key {part!r} of topic {topic!r} must be a non-negative integer"
    raise KafkaConnectorError(msg, code=KafkaCode.SOURCE_OPTION)


def _shape_msg(option: str, detail: str) -> str:
    return f'{option}: expected JSON like {{"topic": {{"0": 23, "1": -2}}}} ({detail})'
