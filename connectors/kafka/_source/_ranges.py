"""Offset ranges and their planning: data-loss checks, rate limiting, splitting.

Everything here is pure (no Kafka client), so it is unit-tested in isolation. The driver
plans ranges; each Spark task reads exactly one :class:`OffsetRange`.

A range is ``[start, end)`` in Kafka offsets. Under read_committed, offsets are not rows:
control markers and aborted batches occupy offsets without producing rows, so a range of
size n yields at most n rows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from connectors.kafka._errors import KafkaCode, KafkaConnectorError

from ._offsets import TopicPartitionKey

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic-partition, read by a single task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """Number of offsets covered (not rows: markers and aborted data leave gaps)."""
        return max(0, self.end - self.start)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}[{self.start},{self.end})"


def plan_ranges(
    start: Mapping[TopicPartitionKey, int],
    end: Mapping[TopicPartitionKey, int],
    earliest: Mapping[TopicPartitionKey, int],
    *,
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """Turn start/end offsets into non-empty ranges, enforcing ``failOnDataLoss``.

    Steps:
        1. A partition in ``end`` but not in ``start`` is new: it starts at offset 0.
        2. A partition in ``start`` but not in ``end`` disappeared: data loss.
        3. ``end < start`` (offsets went backwards, e.g. a recreated topic): data loss;
           the range is dropped.
        4. ``start < earliest`` (retention or DeleteRecords removed offsets): data loss;
           the range then starts at ``earliest`` (and is dropped if nothing remains).

    Data loss raises :class:`KafkaCode.DATA_LOSS` when ``fail_on_data_loss``; otherwise it logs
    a warning and continues as described.

    Returns:
        Ranges with ``end > start``, sorted by topic-partition.

    """
    ranges: list[OffsetRange] = []
    lost = lost_offsets(start, end)
    for message in lost.values():
        report_data_loss(message, fail_on_data_loss)
    for tp in sorted(end):
        lo, hi = start.get(tp, 0), end[tp]
        if tp in lost:
            continue
        low_water = earliest.get(tp, 0)
        if lo < low_water and hi > lo:
            report_data_loss(
                f"partition {_tp(tp)}: offsets [{lo},{min(low_water, hi)}) were deleted "
                f"(earliest available is {low_water}) before they could be read",
                fail_on_data_loss,
            )
            lo = min(low_water, hi)
        if hi > lo:
            ranges.append(OffsetRange(topic=tp[0], partition=tp[1], start=lo, end=hi))
    return ranges


def lost_offsets(
    start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int]
) -> dict[TopicPartitionKey, str]:
    """Partitions of ``start`` that ``end`` lacks or puts lower, each with what was lost."""
    lost: dict[TopicPartitionKey, str] = {}
    for tp in sorted(start):
        if tp not in end:
            lost[tp] = (
                f"partition {_tp(tp)} no longer exists (topic deleted?); offsets from "
                f"{start[tp]} on were not read"
            )
        elif end[tp] < start[tp]:
            lost[tp] = (
                f"partition {_tp(tp)}: latest offset {end[tp]} is below the planned start "
                f"{start[tp]} (topic recreated or log truncated); offsets were lost"
            )
    return lost


def rate_limit(
    start: Mapping[TopicPartitionKey, int],
    latest: Mapping[TopicPartitionKey, int],
    max_offsets: int,
) -> dict[TopicPartitionKey, int]:
    """Cap the total offsets of a micro-batch at ``max_offsets``, shared by lag.

    Steps:
        1. Each lagging partition gets ``floor(max_offsets * lag / total_lag)`` offsets.
        2. The remainder goes one by one to the largest fractional parts.
        3. If ``max_offsets`` covers every lagging partition, each gets at least one
           offset (taken from the largest share), so no partition starves.

    Guarantee: the batch covers exactly ``min(max_offsets, total_lag)`` offsets and no
    partition goes past its latest offset. Partitions new since ``start`` begin at 0.

    Returns:
        The end offsets of the micro-batch (same keys as ``latest``).

    """
    lags = {tp: hi - start.get(tp, 0) for tp, hi in latest.items() if hi > start.get(tp, 0)}
    total = sum(lags.values())
    if total <= max_offsets:
        return dict(latest)
    shares = {tp: max_offsets * lag // total for tp, lag in lags.items()}
    by_remainder = sorted(lags, key=lambda tp: (-(max_offsets * lags[tp] % total), tp))
    for tp in by_remainder[: max_offsets - sum(shares.values())]:
        shares[tp] += 1
    if max_offsets >= len(lags):
        for tp in sorted(tp for tp, share in shares.items() if share == 0):
            donor = max(shares, key=lambda d: (shares[d], d))
            shares[donor] -= 1
            shares[tp] = 1
    result = dict(latest)
    for tp, share in shares.items():
        result[tp] = start.get(tp, 0) + share
    return result


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None = None
) -> list[OffsetRange]:
    """Split ranges: at most ``max_records`` offsets each, then about ``min_partitions`` of them.

    Spark's ``maxRecordsPerPartition`` and ``minPartitions``: a range larger than
    ``max_records`` is cut into ``ceil(size / max_records)`` near-equal pieces; if fewer
    ranges than ``min_partitions`` remain, each is cut into a number of near-equal pieces
    proportional to its share of all offsets (at least one piece, at most one per offset).
    Pieces are contiguous and cover their range exactly.
    """
    if max_records is not None:
        ranges = [piece for r in ranges for piece in _cut(r, -(-r.size // max_records))]
    if min_partitions is None or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    if total == 0:
        return list(ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        out.extend(_cut(r, min(r.size, max(1, round(r.size * min_partitions / total)))))
    return out


def _cut(r: OffsetRange, pieces: int) -> list[OffsetRange]:
    """``r`` in ``pieces`` contiguous near-equal ranges (the first ones one offset longer)."""
    if pieces <= 1:
        return [r]
    base, extra = divmod(r.size, pieces)
    out: list[OffsetRange] = []
    lo = r.start
    for i in range(pieces):
        hi = lo + base + (1 if i < extra else 0)
        out.append(OffsetRange(topic=r.topic, partition=r.partition, start=lo, end=hi))
        lo = hi
    return out


def _tp(tp: TopicPartitionKey) -> str:
    return f"{tp[0]}-{tp[1]}"


def report_data_loss(message: str, fail: bool) -> None:
    """Raise :class:`KafkaCode.DATA_LOSS` for ``message`` when ``fail``, else log a warning."""
    if fail:
        msg = (
            f"{message}. Set failOnDataLoss=false to skip lost offsets with a warning, "
            "or restart the query from a new checkpoint."
        )
        raise KafkaConnectorError(msg, code=KafkaCode.DATA_LOSS)
    _log.warning("kafka-rc: possible data loss: %s (failOnDataLoss=false, continuing)", message)
