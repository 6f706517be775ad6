"""Driver memory of a stream reader: the offsets the query reached, to merge answers with.

Spark hands ``latestOffset`` and ``partitions`` the previous batch's end offsets. Release
0.1.0 could write an end that lacks partitions (even ``{}``) when a broker outage made
discovery answer with fewer topics; such an end carries no information about the missing
partitions. :class:`ReadPosition` keeps, for one query run, the last offsets
Spark or the reader saw per partition, so the reader can fill them in instead of reading
those partitions again from 0 (duplicates) or calling them lost (a false KafkaCode.DATA_LOSS).
The rules are in docs/kafka-source.md ("Broker outages and restarts").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from ._offsets import TopicPartitionKey

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
    """Offsets Spark's checkpoint lost for some partitions, and the partitions gone (driver).

    Contract:
        - :meth:`carry` keeps a partition of ``begin`` that ``end`` lacks at its ``begin``
          offset (read nothing of it) and remembers that offset, unless the partition was
          confirmed gone;
        - :meth:`begin` fills remembered partitions into a ``start`` that lacks them, and
          forgets those ``start`` names (Spark's checkpoint has them again);
        - :meth:`seen` marks partitions of a new end as not gone; :meth:`forget` marks
          partitions confirmed gone, which are never carried or filled in.
    """

    def __init__(self) -> None:
        self.carried: Offsets = {}
        self.gone: set[TopicPartitionKey] = set()

    def begin(self, start: Mapping[TopicPartitionKey, int]) -> Offsets:
        """Return ``start`` with remembered partitions it lacks filled in."""
        for tp in start:
            self.carried.pop(tp, None)
        if self.carried:
            _log.warning(
                "kafka-rc: the checkpointed start offsets lack %s (written during a broker "
                "outage by release 0.1.0); continuing from the offsets seen before: %s",
                _names(self.carried),
                self.carried,
            )
        return {**self.carried, **start}

    def carry(
        self, begin: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int]
    ) -> Offsets:
        """Return ``end`` with partitions of ``begin`` it lacks (and not gone) kept at ``begin``."""
        missing = {tp: o for tp, o in begin.items() if tp not in end and tp not in self.gone}
        if missing:
            _log.warning(
                "kafka-rc: the batch's end offsets lack %s (written during a broker outage by "
                "release 0.1.0): no information about them; this batch reads nothing of them "
                "and the next one continues from %s",
                _names(missing),
                missing,
            )
            self.carried.update(missing)
        return {**missing, **end}

    def seen(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Partitions in a new end exist (again): no longer gone."""
        self.gone.difference_update(partitions)

    def forget(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Mark ``partitions`` confirmed gone: never filled in or carried again."""
        for tp in partitions:
            self.carried.pop(tp, None)
            self.gone.add(tp)


def _names(offsets: Mapping[TopicPartitionKey, int]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(offsets))
