"""Per-epoch metrics of a sink on the stage: collected on the driver, from the task results.

One :class:`EpochMetrics` per ``foreachBatch`` call, exposed three ways:

1. :meth:`~connectors.stage.TransactionalSink.metrics`: the sink's recent epochs as data;
2. one structured log line per epoch (logger ``connectors.stage.metrics``, JSON);
3. :class:`~connectors.stage.MetricsListener`, beside Spark's own query progress;

and to observers (:meth:`~connectors.stage.TransactionalSink.observe_metrics`), such as the
Prometheus exporter (:mod:`connectors.prometheus`).

Timings of the write tasks are the slowest task's, from the task's start: ``pre_commit_ms``
(rows written and pre-committed), ``vote_ms`` (waiting for every vote; 0 unaligned),
``commit_ms`` (the commit itself).

Rows: ``member_rows`` has the rows each member sink wrote (one entry for a single sink);
``rows_written`` is their sum; ``rows`` is the largest member's count, which is the
micro-batch's row count when every member writes one row per input row (a composite whose
selects project the batch), so a 5,000-row batch written to a topic and a table reports
``rows=5000``, ``rows_written=10000``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from txn import EpochCompletion, EpochHistory, EpochLog, EpochResult, LogRecord
from txn._model import PartitionOutcome

log = logging.getLogger("connectors.stage.metrics")

# Epochs a sink keeps in memory for metrics(): enough for dashboards polling every
# minute at one epoch per second, bounded so a long-running query does not grow.
RECENT_EPOCHS = 100


@dataclass(frozen=True, kw_only=True)
class TaskStats:
    """What one write task measured (travels back inside its task result).

    ``notes``: what the task's resource sent on the back channel, (member, note)
    (``_backchannel``); ``clients_new``: clients it set up anew, not kept from earlier tasks.
    """

    partition: int
    task_attempt: int = 0
    rows: int = 0
    bytes: int = 0
    pre_commit_ms: float = 0.0
    vote_ms: float = 0.0
    commit_ms: float = 0.0
    claimed: bool = True  # at-most-once: False when another attempt owned the partition
    dead_lettered: int = 0  # bad records sent to the dead-letter destination
    skipped_records: int = 0  # bad records left out (on_bad_record="skip")
    notes: tuple[tuple[int, Any], ...] = ()
    clients_new: int = 0


@dataclass(frozen=True, kw_only=True)
class EpochMetrics:
    """Everything one ``foreachBatch`` call of a sink did (picklable, JSON-ready)."""

    sink_id: str
    batch_id: int
    epoch: int
    query_id: str | None
    guarantee: str
    mode: str
    skipped: bool
    committed: bool
    plan_attempt: int = 0
    rows: int = 0  # the largest member's rows (module docstring)
    rows_written: int = 0  # every member's rows together
    member_rows: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    write_tasks: int = 0
    partitions_committed: int = 0
    partitions_skipped: int = 0  # already committed, found by marker
    partitions_redone: int = 0  # written again in a redo (plan attempt > 0 or stage re-run)
    partitions_lost: int = 0  # at-most-once: not written because an earlier attempt owned them
    clients_new: int = 0  # clients the write tasks set up anew (not kept from earlier tasks)
    stage_runs: int = 0
    task_retries: int = 0
    aborted_attempts: int = 0  # failed stage runs and failed task attempts
    epoch_log_appends: int = 0
    dead_lettered: int = (
        0  # bad records written to the dead-letter destination (docs/bad-records.md)
    )
    skipped_records: int = 0  # bad records left out, logged (on_bad_record="skip")
    pre_commit_ms: float = 0.0
    vote_ms: float = 0.0
    commit_ms: float = 0.0
    stage_ms: float = 0.0
    epoch_ms: float = 0.0
    error: str | None = None

    def to_json(self) -> str:
        """One line of JSON (the structured log line)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


class MemberShare(NamedTuple):
    """One member sink's write partitions of a plan: ``offset .. offset + width - 1``."""

    name: str
    offset: int
    width: int


@dataclass(kw_only=True)
class EpochRecorder:
    """Collects one epoch's metrics while the sink runs it (driver side, one call)."""

    sink_id: str
    batch_id: int
    query_id: str | None
    started: float = field(default_factory=time.monotonic)
    epoch: int = -1
    stage_runs: int = 0
    stage_ms: float = 0.0
    failed_runs: int = 0
    tasks: list[TaskStats] = field(default_factory=list)
    members: dict[int, MemberShare] = field(default_factory=dict)  # member index -> share

    def add_member(self, index: int, sink_id: str, offset: int, width: int) -> None:
        """Note member ``index``'s partitions of the plan (named by its sink id, made unique)."""
        taken = {m.name for i, m in self.members.items() if i != index}
        name = sink_id if sink_id not in taken else f"{sink_id}#{index}"
        self.members[index] = MemberShare(name, offset, width)

    def stage_ran(self, seconds: float, stats: Iterable[TaskStats], *, failed: bool) -> None:
        """Record one run of the write stage (its tasks' stats, if it returned)."""
        self.stage_runs += 1
        self.stage_ms += seconds * 1000.0
        self.failed_runs += int(failed)
        self.tasks = list(stats) or self.tasks

    def finish(
        self, result: EpochResult | None, appends: int, error: BaseException | None = None
    ) -> EpochMetrics:
        """Build the epoch's metrics from the coordinator's result (None: it failed)."""
        reports = result.reports if result is not None else ()
        plan = result.plan if result is not None else None
        redo = plan is not None and (plan.attempt > 0 or self.stage_runs > 1)
        written = [r for r in reports if r.outcome in _WRITTEN]
        lost = sum(1 for t in self.tasks if not t.claimed)
        retries = sum(1 for t in self.tasks if t.task_attempt > 0)
        per_member = {
            m.name: sum(r.rows for r in written if m.offset <= r.partition < m.offset + m.width)
            for m in self.members.values()
        }
        total = sum(r.rows for r in written)
        kept = {r.partition for r in written}
        bad = [t for t in self.tasks if t.partition in kept]
        return EpochMetrics(
            sink_id=self.sink_id,
            batch_id=self.batch_id,
            query_id=self.query_id,
            epoch=result.epoch if result is not None else self.epoch,
            guarantee=plan.guarantee.value if plan else "",
            mode=plan.mode.value if plan else "",
            skipped=bool(result and result.skipped),
            committed=bool(result and result.committed),
            plan_attempt=plan.attempt if plan else 0,
            rows=max(per_member.values(), default=total),
            rows_written=total,
            member_rows=per_member,
            bytes=sum(t.bytes for t in self.tasks),
            write_tasks=plan.parallelism if plan and self.stage_runs else 0,
            partitions_committed=len(written) - (lost if written else 0),
            partitions_skipped=sum(
                1 for r in reports if r.outcome is PartitionOutcome.ALREADY_COMMITTED
            ),
            partitions_redone=len(written) if redo else 0,
            clients_new=sum(t.clients_new for t in self.tasks),
            partitions_lost=lost,
            stage_runs=self.stage_runs,
            task_retries=retries,
            aborted_attempts=self.failed_runs + retries,
            epoch_log_appends=appends,
            dead_lettered=sum(t.dead_lettered for t in bad),
            skipped_records=sum(t.skipped_records for t in bad),
            pre_commit_ms=_slowest(self.tasks, "pre_commit_ms"),
            vote_ms=_slowest(self.tasks, "vote_ms"),
            commit_ms=_slowest(self.tasks, "commit_ms"),
            stage_ms=round(self.stage_ms, 3),
            epoch_ms=round((time.monotonic() - self.started) * 1000.0, 3),
            error=None if error is None else f"{type(error).__name__}: {str(error)[:500]}",
        )


_WRITTEN = (PartitionOutcome.COMMITTED, PartitionOutcome.PREPARED)


def _slowest(tasks: Sequence[TaskStats], name: str) -> float:
    return round(max((float(getattr(t, name)) for t in tasks), default=0.0), 3)


class MetricsBook:
    """The sink's recent epochs (bounded), the structured log line per epoch, and observers.

    An observer (:meth:`observe`) is called with each epoch's metrics as they are recorded,
    on the thread that ran the epoch (the ``foreachBatch`` call); it must return quickly. An
    observer that raises is logged and skipped: metrics never fail an epoch.
    """

    def __init__(self, keep: int = RECENT_EPOCHS) -> None:
        self._recent: deque[EpochMetrics] = deque(maxlen=keep)
        self._observers: list[Callable[[EpochMetrics], None]] = []
        self._lock = threading.RLock()

    def add(self, metrics: EpochMetrics) -> None:
        """Keep ``metrics``, log it as one JSON line and hand it to every observer."""
        log.info("epoch %s", metrics.to_json())
        with self._lock:  # observers see the epochs in order, each once
            self._recent.append(metrics)
            for observer in self._observers:
                _notify(observer, metrics)

    def observe(self, observer: Callable[[EpochMetrics], None]) -> Callable[[], None]:
        """Call ``observer`` with every kept epoch now, then with each new one.

        Returns the function that removes the observer again.
        """
        with self._lock:
            for metrics in self._recent:
                _notify(observer, metrics)
            self._observers.append(observer)

        def remove() -> None:
            with self._lock:
                if observer in self._observers:
                    self._observers.remove(observer)

        return remove

    def recent(self) -> tuple[EpochMetrics, ...]:
        """Return the kept epochs, oldest first."""
        with self._lock:
            return tuple(self._recent)

    def for_batch(self, query_id: str | None, batch_id: int) -> EpochMetrics | None:
        """Return the latest metrics of ``batch_id`` of ``query_id``, if kept."""
        for m in reversed(self.recent()):
            if m.batch_id == batch_id and (query_id is None or m.query_id == query_id):
                return m
        return None


def _notify(observer: Callable[[EpochMetrics], None], metrics: EpochMetrics) -> None:
    try:
        observer(metrics)
    except Exception:  # an observer's bug must not fail the epoch
        log.warning("metrics observer %r failed", observer, exc_info=True)


class CountingLog(EpochLog):
    """An :class:`txn.EpochLog` that counts the records it made durable.

    Wraps a :class:`txn._deferred.DeferredCompletionLog`: a deferred completion counts when it is
    written (with the next record, or by :meth:`flush`).
    """

    def __init__(self, inner: EpochLog) -> None:
        self._inner = inner
        self.appends = 0

    @property
    def sink_id(self) -> str:
        """The wrapped log's sink."""
        return self._inner.sink_id

    @property
    def pending(self) -> EpochCompletion | None:
        """The wrapped log's deferred completion."""
        return self._inner.pending

    def load(self) -> EpochHistory:
        """Load through the wrapped log."""
        return self._inner.load()

    def append(self, record: LogRecord) -> None:
        """Append through the wrapped log and count it."""
        self.append_all((record,))

    def append_all(self, records: Sequence[LogRecord]) -> None:
        """Append through the wrapped log; count them and a deferred completion written."""
        held = self._inner.pending is not None
        self._inner.append_all(records)
        self.appends += len(records) + (held and self._inner.pending is None)

    def append_deferred(self, completion: EpochCompletion) -> None:
        """Defer through the wrapped log (counted once written)."""
        held = self._inner.pending is not None
        self._inner.append_deferred(completion)
        self.appends += held  # a completion held before was written now

    def flush(self) -> None:
        """Flush the wrapped log, counting a deferred completion written."""
        self.append_all(())

    def close(self) -> None:
        """Close the wrapped log."""
        self._inner.close()
