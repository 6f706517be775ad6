"""A hand-driven clock for coordinator unit tests (implements minikafka._clock.Clock)."""

from __future__ import annotations


class ManualClock:
    """Time moves only when a test calls :meth:`advance`."""

    def __init__(self, wall_ms: int = 1_700_000_000_000) -> None:
        self._wall_ms = wall_ms
        self._mono_s = 1000.0

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic_s(self) -> float:
        return self._mono_s

    def advance(self, ms: int) -> None:
        self._wall_ms += ms
        self._mono_s += ms / 1000
