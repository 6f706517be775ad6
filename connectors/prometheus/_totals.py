"""What the Prometheus collector adds up from a sink's epochs (plain Python, no client).

:class:`SinkTotals` turns the stream of one sink's :class:`~connectors.stage.EpochMetrics`
(for one streaming query) into counters, gauges and histograms; the collector
(``_collector``) renders them. Everything here is cumulative since the sink was watched.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from connectors.stage import EpochMetrics

# Upper bounds (seconds) of the epoch and phase duration histograms: from a fast empty
# epoch to the broker's default transaction.max.timeout.ms (15 minutes).
DURATION_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
# The ``outcome`` label of eos_sink_epochs_total: the foreachBatch call committed its
# epoch; skipped it (a replayed batch whose epoch had committed); or failed (raised).
OUTCOMES = ("committed", "skipped", "failed")
# The ``state`` label of eos_sink_partitions_total (EpochMetrics.partitions_<state>).
PARTITION_STATES = ("committed", "skipped", "redone", "lost")
# The ``phase`` label of eos_sink_phase_duration_seconds (EpochMetrics.<phase>_ms).
PHASES = ("pre_commit", "vote", "commit", "stage")


@dataclass
class Histogram:
    """Counts per bucket (not cumulative; the last one is ``+Inf``) and the sum."""

    bounds: tuple[float, ...] = DURATION_BUCKETS_S
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is at least ``value``."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count)`` pairs as the exposition format has them, ``+Inf`` last."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


@dataclass(kw_only=True)
class SinkTotals:
    """One sink's counters and gauges for one query (``query_id`` "" when unbound)."""

    sink_id: str
    query_id: str
    epochs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    partitions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTITION_STATES, 0))
    rows_written: int = 0
    bytes_written: int = 0
    member_rows: dict[str, int] = field(default_factory=dict)
    epochs_redone: int = 0
    stage_runs: int = 0
    task_retries: int = 0
    aborted_attempts: int = 0
    epoch_log_appends: int = 0
    dead_lettered: int = 0
    skipped_records: int = 0
    last_committed_epoch: int | None = None
    last_committed_batch_id: int | None = None
    last_commit_time_s: float | None = None  # Unix time the collector saw the commit
    last_epoch_failed: bool = False
    last_epoch_s: float | None = None
    write_tasks: int = 0
    epoch_s: Histogram = field(default_factory=Histogram)
    phase_s: dict[str, Histogram] = field(
        default_factory=lambda: {phase: Histogram() for phase in PHASES}
    )

    def add(self, m: EpochMetrics, now_s: float) -> None:
        """Count one ``foreachBatch`` call's metrics, seen at Unix time ``now_s``."""
        outcome = "skipped" if m.skipped else "committed" if m.committed else "failed"
        self.epochs[outcome] += 1
        self.last_epoch_failed = outcome == "failed"
        for state in PARTITION_STATES:
            self.partitions[state] += int(getattr(m, f"partitions_{state}"))
        self.rows_written += m.rows_written
        self.bytes_written += m.bytes
        for member, rows in m.member_rows.items():
            self.member_rows[member] = self.member_rows.get(member, 0) + rows
        self.epochs_redone += int(m.partitions_redone > 0)
        self.stage_runs += m.stage_runs
        self.task_retries += m.task_retries
        self.aborted_attempts += m.aborted_attempts
        self.epoch_log_appends += m.epoch_log_appends
        self.dead_lettered += m.dead_lettered
        self.skipped_records += m.skipped_records
        if outcome == "committed":
            self.last_committed_epoch = m.epoch
            self.last_committed_batch_id = m.batch_id
            self.last_commit_time_s = now_s
        if outcome != "skipped":  # a skipped batch takes no time worth a sample
            self.last_epoch_s = m.epoch_ms / 1000.0
            self.epoch_s.observe(self.last_epoch_s)
        if m.stage_runs:
            self.write_tasks = m.write_tasks
            for phase in PHASES:
                self.phase_s[phase].observe(float(getattr(m, f"{phase}_ms")) / 1000.0)
