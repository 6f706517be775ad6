"""``InputOffsets``: where an epoch's input began and ended, per topic-partition.

Carried by :class:`~txn.EpochPlan` (field ``input``), so it is logged before any write task
runs and becomes the *committed* input position exactly when the epoch's commit is logged
(docs/architecture.md, section 11). Offsets are Kafka's: ``end`` is exclusive, the next
offset to read, so a query that starts at the last committed epoch's ``end`` reads every
record after that epoch and nothing of it. Gaps (transaction markers, compacted or
filtered records) need no special case: offsets are positions, not record counts.

The JSON form of ``start`` / ``end`` is the one of Spark's Kafka source and of
``startingOffsets``: ``{"topic": {"0": 23, "1": 42}}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from txn._errors import TxnCode, TxnError

TopicPartition = tuple[str, int]
Positions = tuple[tuple[str, int, int], ...]  # (topic, partition, offset), sorted


def _positions(offsets: Mapping[TopicPartition, int], what: str) -> Positions:
    out = tuple(sorted((t, int(p), int(o)) for (t, p), o in offsets.items()))
    for topic, partition, offset in out:
        if not isinstance(topic, str) or not topic or partition < 0 or offset < 0:
            msg = f"{what}: bad position {topic!r}-{partition} at {offset}"
            raise ValueError(msg)
    return out


def offsets_json(positions: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(topic, partition): offset}`` as ``{"topic": {"0": offset}}`` (sorted)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def parse_offsets_json(obj: Any, what: str) -> dict[TopicPartition, int]:
    """Parse ``{"topic": {"0": offset}}`` (offsets >= 0); raise ValueError naming ``what``."""
    if not isinstance(obj, dict):
        msg = f"{what}: expected an object of topics, got {type(obj).__name__}"
        raise ValueError(msg)
    out: dict[TopicPartition, int] = {}
    for topic, parts in obj.items():
        if not isinstance(topic, str) or not topic or not isinstance(parts, dict):
            msg = f"{what}: topic {topic!r} maps to {parts!r}, want {{partition: offset}}"
            raise ValueError(msg)
        for part, offset in parts.items():
            if not (isinstance(part, str) and part.isdigit()):
                msg = f"{what}: partition {part!r} of {topic!r} is not a non-negative integer"
                raise ValueError(msg)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                msg = f"{what}: offset of {topic}-{part} is {offset!r}, want an int >= 0"
                raise ValueError(msg)
            out[(topic, int(part))] = offset
    return out


@dataclass(frozen=True)
class InputOffsets:
    """The input of one epoch: ``[start, end)`` per topic-partition of its Kafka sources.

    * ``start``: where the micro-batch began (a partition it lacks began at its earliest);
    * ``end``: where it ended (exclusive); after the epoch commits, the next record to read;
    * ``other_sources``: streaming sources of the query that are not Kafka (their position
      is not recorded, so the epoch cannot be resumed from the output).

    Frozen and picklable: it travels inside the plan to the write tasks.
    """

    start: Positions = ()
    end: Positions = ()
    other_sources: int = 0

    @classmethod
    def of(
        cls,
        start: Mapping[TopicPartition, int],
        end: Mapping[TopicPartition, int],
        other_sources: int = 0,
    ) -> InputOffsets:
        """Build from ``{(topic, partition): offset}`` maps; raise ValueError on a bad one."""
        if isinstance(other_sources, bool) or other_sources < 0:
            msg = f"other_sources must be an int >= 0, got {other_sources!r}"
            raise ValueError(msg)
        return cls(_positions(start, "start"), _positions(end, "end"), int(other_sources))

    @property
    def kafka_only(self) -> bool:
        """Whether every streaming source of the epoch was Kafka (and there was one)."""
        return self.other_sources == 0 and bool(self.end)

    def start_map(self) -> dict[TopicPartition, int]:
        """``{(topic, partition): start offset}``."""
        return {(t, p): o for t, p, o in self.start}

    def end_map(self) -> dict[TopicPartition, int]:
        """``{(topic, partition): end offset}`` (exclusive)."""
        return {(t, p): o for t, p, o in self.end}

    def topics(self) -> frozenset[str]:
        """Topics the epoch read."""
        return frozenset(t for t, _, _ in self.end)

    def end_json(self) -> str:
        """``end`` as compact ``startingOffsets`` JSON."""
        return json.dumps(offsets_json(self.end_map()), separators=(",", ":"))

    def to_body(self) -> dict[str, Any]:
        """Return the JSON object stored in the plan record (``txn._codec``)."""
        return {
            "start": offsets_json(self.start_map()),
            "end": offsets_json(self.end_map()),
            "other_sources": self.other_sources,
        }

    @classmethod
    def from_body(cls, body: Any) -> InputOffsets:
        """Parse :meth:`to_body`'s form; raise ValueError naming the bad part."""
        if not isinstance(body, dict) or set(body) != {"start", "end", "other_sources"}:
            msg = f"input must have fields end, other_sources, start, got {body!r}"
            raise ValueError(msg)
        other = body["other_sources"]
        if isinstance(other, bool) or not isinstance(other, int):
            msg = f"input other_sources is {other!r}, want int"
            raise ValueError(msg)
        return cls.of(
            parse_offsets_json(body["start"], "input start"),
            parse_offsets_json(body["end"], "input end"),
            other,
        )


def check_same_input(epoch: int, planned: InputOffsets | None, given: InputOffsets | None) -> None:
    """Refuse a retry of in-doubt ``epoch`` that reads other input than its plan recorded.

    Raises:
        TxnCode.PLAN_MISMATCH: both are known and differ (the replay is another batch).

    """
    if given is None or planned is None or given == planned:
        return
    msg = (
        f"epoch {epoch} is in doubt and was planned for input {planned.to_body()}, but the "
        f"replayed batch reads {given.to_body()}: it is not the batch that was planned. "
        "Restart the query that planned it from its own checkpoint"
    )
    raise TxnError(msg, code=TxnCode.PLAN_MISMATCH)
