"""Driver memory of a stream reader: the offsets the query reached, to merge answers with.

Spark hands ``latestOffset`` and ``partitions`` the previous batch's end offsets. Release
0.1.0 could write an end that lacks partitions (even ``{}``) when a broker outage made
discovery answer with fewer topics; such an end carries no information about the missing
partitions. :class:`ReadPosition` keeps, for one query run, the last offsets
Spark or the reader saw per partition, so the reader can fill them in instead of reading
those partitions again from 0 (duplicates) or calling them lost (a false DataLossError).
The rules are in docs/kafka-source.md ("Broker outages and restarts").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from ._offsets import TopicPartitionKey

__all__ = ["ReadPosition", "merge_max"]

_log = logging.getLogger(__name__)

Offsets = dict[TopicPartitionKey, int]


def merge_max(*maps: Mapping[TopicPartitionKey, int]) -> Offsets:
    """Union of ``maps``; a partition in several keeps its largest offset."""
    merged: Offsets = {}
    for offsets in maps:
        for tp, offset in offsets.items():
            merged[tp] = max(offset, merged.get(tp, offset))
    return merged


class ReadPosition:
    """Last known offset per partition, and the partitions confirmed gone (driver only).

    Contract:
        - :meth:`begin` returns ``start`` plus every remembered partition it lacks, except
          partitions confirmed gone (:meth:`forget`);
        - :meth:`carry` keeps a partition of ``begin`` that ``end`` lacks at its ``begin``
          offset (read nothing of it) unless it was confirmed gone;
        - :meth:`remember` records the offsets of an end Spark will checkpoint.
    """

    def __init__(self) -> None:
        self.known: Offsets = {}
        self.gone: set[TopicPartitionKey] = set()

    def begin(self, start: Mapping[TopicPartitionKey, int]) -> Offsets:
        """Return ``start`` with remembered partitions it lacks filled in."""
        filled = {tp: o for tp, o in self.known.items() if tp not in start and tp not in self.gone}
        if filled:
            _log.warning(
                "kafka-rc: the checkpointed start offsets lack %s (written during a broker "
                "outage by an earlier release); continuing from the offsets seen before: %s",
                _names(filled),
                filled,
            )
        return {**filled, **start}

    def carry(
        self, begin: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int]
    ) -> Offsets:
        """Return ``end`` with partitions of ``begin`` it lacks (and not gone) kept at ``begin``."""
        missing = {tp: o for tp, o in begin.items() if tp not in end and tp not in self.gone}
        if missing:
            _log.warning(
                "kafka-rc: the batch's end offsets lack %s (written during a broker outage by "
                "an earlier release): no information about them; this batch reads nothing of "
                "them and the next one continues from %s",
                _names(missing),
                missing,
            )
        return {**missing, **end}

    def remember(self, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Record offsets Spark checkpoints (a partition seen again is no longer gone)."""
        self.known.update(offsets)
        self.gone.difference_update(offsets)

    def forget(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Mark ``partitions`` confirmed gone: never filled in or carried again."""
        for tp in partitions:
            self.known.pop(tp, None)
            self.gone.add(tp)


def _names(offsets: Mapping[TopicPartitionKey, int]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(offsets))
