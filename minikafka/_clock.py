"""Time sources of the broker, injectable so coordinators can be tested without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the coordinators need to know about time."""

    def wall_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (persisted timestamps, timeouts, retention)."""
        ...

    def monotonic_s(self) -> float:
        """Monotonic seconds (group sessions and rebalance deadlines)."""
        ...


class SystemClock:
    """The real clock."""

    def wall_ms(self) -> int:
        """Wall-clock milliseconds (``time.time``)."""
        return int(time.time() * 1000)

    def monotonic_s(self) -> float:
        """Monotonic seconds (``time.monotonic``)."""
        return time.monotonic()
