"""Check that the sink's epoch log agrees with the idempotency markers stored in Kafka.

Contract checked (exactly-once sinks whose tasks commit their own transactions):

1. no epoch is left in doubt (planned but never completed) once the query has stopped,
   except the last one when every write partition's marker shows it: its completion is
   deferred (docs/architecture.md, "Deferred completion"; written by the sink's next call
   or close, or settled by its markers after a crash), so it counts as committed;
2. if epoch ``E`` is the last one logged complete with parallelism ``P``, every write partition
   ``p < P`` holds a marker of epoch ``>= E`` (each task commits a marker, even for no rows);
3. no marker names an epoch the log never planned (a write the coordinator does not know of);
4. with no committed epoch in the log, no marker may exist at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from connectors.verify._analysis import Anomaly, AnomalyKind


class MarkerLike(Protocol):
    """What the check reads from a marker (``txn.Marker`` fits)."""

    @property
    def epoch(self) -> int: ...

    @property
    def rows(self) -> int: ...


class PlanLike(Protocol):
    """What the check reads from an epoch plan (``txn.EpochPlan`` fits)."""

    @property
    def epoch(self) -> int: ...

    @property
    def parallelism(self) -> int: ...


class HistoryLike(Protocol):
    """What the check reads from an epoch history (``txn.EpochHistory`` fits)."""

    def plan(self, epoch: int) -> PlanLike | None: ...

    def in_doubt(self) -> Sequence[PlanLike]: ...

    def last_committed_epoch(self) -> int | None: ...

    def max_parallelism(self) -> int: ...


def check_epoch_log(
    history: HistoryLike,
    markers: Mapping[int, MarkerLike | None],
    *,
    allow_in_doubt: bool = False,
) -> list[Anomaly]:
    """Return the anomalies of contract points 1-4 (module docstring)."""
    found: list[Anomaly] = []
    deferred = deferred_epoch(history, markers)
    if not allow_in_doubt:
        for plan in history.in_doubt():
            if plan.epoch == deferred:
                continue
            found.append(
                Anomaly(
                    kind=AnomalyKind.IN_DOUBT_EPOCH,
                    detail=f"epoch {plan.epoch} is planned (parallelism "
                    f"{plan.parallelism}) but never completed",
                )
            )
    last = history.last_committed_epoch() if deferred is None else deferred
    if last is None:
        for p, marker in sorted(markers.items()):
            if marker is not None:
                found.append(
                    _mismatch(
                        p,
                        f"marker of epoch {marker.epoch} exists but the log has no committed epoch",
                    )
                )
        return found
    last_plan = history.plan(last)
    if last_plan is not None:
        for p in range(last_plan.parallelism):
            marker = markers.get(p)
            if marker is None or marker.epoch < last:
                seen = "no marker" if marker is None else f"a marker of epoch {marker.epoch}"
                found.append(
                    _mismatch(
                        p,
                        f"epoch {last} is logged complete with parallelism "
                        f"{last_plan.parallelism} but write partition {p} has {seen}",
                    )
                )
    for p, marker in sorted(markers.items()):
        if marker is not None and marker.epoch > last and history.plan(marker.epoch) is None:
            found.append(
                _mismatch(
                    p,
                    f"marker of epoch {marker.epoch} but the log never "
                    f"planned it (last committed: {last})",
                )
            )
    return found


def deferred_epoch(history: HistoryLike, markers: Mapping[int, MarkerLike | None]) -> int | None:
    """Return the last epoch, alone in doubt, that every write partition's marker shows (point 1)."""
    doubtful = list(history.in_doubt())
    if len(doubtful) != 1:
        return None
    plan = doubtful[0]
    last = history.last_committed_epoch()
    if last is not None and plan.epoch < last:
        return None
    covered = all(
        (m := markers.get(p)) is not None and m.epoch >= plan.epoch for p in range(plan.parallelism)
    )
    return plan.epoch if covered else None


def _mismatch(partition: int, detail: str) -> Anomaly:
    return Anomaly(kind=AnomalyKind.EPOCH_LOG_MISMATCH, detail=detail, partition=partition)


@dataclass(frozen=True)
class _SharePlan:
    epoch: int
    parallelism: int


@dataclass(frozen=True)
class _MemberHistory:
    history: HistoryLike
    members: int

    def _share(self, plan: PlanLike | None) -> PlanLike | None:
        return None if plan is None else _SharePlan(plan.epoch, plan.parallelism // self.members)

    def plan(self, epoch: int) -> PlanLike | None:
        return self._share(self.history.plan(epoch))

    def in_doubt(self) -> Sequence[PlanLike]:
        return [_SharePlan(p.epoch, p.parallelism // self.members) for p in self.history.in_doubt()]

    def last_committed_epoch(self) -> int | None:
        return self.history.last_committed_epoch()

    def max_parallelism(self) -> int:
        return self.history.max_parallelism() // self.members


def member_history(history: HistoryLike, members: int) -> HistoryLike:
    """Return the epoch log of a composite sink (``CompositeSink``) as one member sees it.

    For a composite of ``members`` members with the same parallelism each (a plan of
    parallelism ``P`` gives every member ``P / members`` write partitions, numbered from 0
    in the member's own markers): the same epochs, each plan's parallelism divided by
    ``members``, so :func:`check_epoch_log` can compare it with one member's markers.
    """
    if isinstance(members, bool) or not isinstance(members, int) or members < 1:
        msg = f"members must be a positive int, got {members!r}"
        raise ValueError(msg)
    return _MemberHistory(history, members)


def open_history(
    epoch_log: str | HistoryLike | None, sink_id: str, own_log: Callable[[], Any]
) -> HistoryLike:
    """Load a sink's epoch history and close the log.

    ``epoch_log``: an already loaded history (returned as is), a ``FileEpochLog`` path, or
    None for the sink's own log, opened by ``own_log()`` (a Kafka or PostgreSQL epoch log).
    """
    if epoch_log is not None and not isinstance(epoch_log, str):
        return epoch_log
    log: Any
    if isinstance(epoch_log, str):
        from txn import FileEpochLog

        log = FileEpochLog(epoch_log, sink_id=sink_id)
    else:
        log = own_log()
    try:
        history: HistoryLike = log.load()
    finally:
        log.close()
    return history
