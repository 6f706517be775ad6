"""A rate-limited warning when a share of a batch's requests fail or time out.

With ``on_timeout`` ``DEFAULT`` or ``DROP`` a service that is down turns every row into the
default or drops it; retries hide a flaky one. Neither fails the batch, so without this
log line only the metrics would show it. Contract:

1. after each input batch the operator reports its requests, the timed-out ones (and what
   ``on_timeout`` did with their rows) and the ones that needed a retry;
2. a batch is *unhealthy* when at least ``UNHEALTHY_SHARE`` of its requests timed out or
   needed a retry, whatever the timeout policy;
3. at most one warning per ``WARN_INTERVAL_S`` per Python process (logger
   ``connectors.async_io``); unhealthy batches in between are counted and summed into the
   next warning, so none goes unreported.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

log = logging.getLogger("connectors.async_io")

# Share of a batch's requests that timed out or needed a retry from which the batch is
# worth a warning: a service outage or a flood of errors, not one slow request.
UNHEALTHY_SHARE = 0.05
# Seconds between two warnings of one process: one line per half minute is enough to
# see an outage without flooding the executor log once per batch.
WARN_INTERVAL_S = 30.0


@dataclass(kw_only=True)
class BatchHealth:
    """What one input batch's requests went through (counts of requests and rows)."""

    requests: int = 0
    timed_out: int = 0
    retried: int = 0  # requests that had at least one failed attempt
    dropped_rows: int = 0
    defaulted_rows: int = 0

    @property
    def unhealthy(self) -> bool:
        """Whether enough requests timed out or needed a retry (contract point 2)."""
        troubled = self.timed_out + self.retried
        return self.requests > 0 and troubled >= UNHEALTHY_SHARE * self.requests

    def add(self, other: BatchHealth) -> None:
        """Sum ``other`` into this one."""
        self.requests += other.requests
        self.timed_out += other.timed_out
        self.retried += other.retried
        self.dropped_rows += other.dropped_rows
        self.defaulted_rows += other.defaulted_rows


class HealthWarnings:
    """Rate-limits the warnings of every operator of one process (contract point 3)."""

    def __init__(self, interval_s: float = WARN_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last: float | None = None
        self._pending = BatchHealth()
        self._batches = 0

    def report(self, health: BatchHealth, partition: int, on_timeout: str) -> bool:
        """Note one batch; log a warning if it is unhealthy and the interval passed."""
        if not health.unhealthy:
            return False
        with self._lock:
            self._pending.add(health)
            self._batches += 1
            now = time.monotonic()
            if self._last is not None and now - self._last < self.interval_s:
                return False
            total, batches = self._pending, self._batches
            self._pending, self._batches, self._last = BatchHealth(), 0, now
        log.warning(
            "async_map: %d of %d requests failed or timed out in %d batch(es) (partition %d "
            "the last): %d timed out (on_timeout=%s: %d rows dropped, %d rows given the "
            "default), %d needed retries; is the service down or overloaded? (at most one "
            "such warning per %.0f s)",
            total.timed_out + total.retried,
            total.requests,
            batches,
            partition,
            total.timed_out,
            on_timeout,
            total.dropped_rows,
            total.defaulted_rows,
            total.retried,
            self.interval_s,
        )
        return True


# One per process: Spark runs many operators (tasks) in one Python worker over time.
WARNINGS = HealthWarnings()
