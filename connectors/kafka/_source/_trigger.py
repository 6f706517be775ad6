"""``minOffsetsPerTrigger`` with ``maxTriggerDelay``: when a micro-batch waits for more data.

Spark's Kafka source, on the driver: a trigger whose new offsets (latest minus start,
summed over partitions) are fewer than ``minOffsetsPerTrigger`` plans no batch, unless
``maxTriggerDelay`` has passed since the last batch was let through; the first trigger of
a query run always goes through. Not applied under ``Trigger.AvailableNow`` (a run that
waited would end without reading what it planned to) nor to a ``ReadAllAvailable`` limit
(``Trigger.Once``), as in Spark.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from ._offsets import TopicPartitionKey


class MinOffsetsGate:
    """Whether a trigger waits for ``min_offsets`` new offsets (driver state of one reader).

    ``clock`` returns seconds (monotonic); the gate is not shipped to tasks.
    """

    def __init__(
        self, min_offsets: int, max_delay_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._min = min_offsets
        self._max_delay_s = max_delay_ms / 1000.0
        self._clock = clock
        self._last_batch_at: float | None = None

    def holds(
        self, start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int]
    ) -> bool:
        """Whether this trigger plans no batch (fewer new offsets than the minimum, in time)."""
        now = self._clock()
        if self._last_batch_at is None or now - self._last_batch_at >= self._max_delay_s:
            self._last_batch_at = now
            return False
        new = sum(offset - start.get(tp, 0) for tp, offset in latest.items())
        if new < self._min:
            return True
        self._last_batch_at = now
        return False
