"""The task-side driver of one write partition for one epoch (engine agnostic)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from txn._errors import TxnCode, TxnError
from txn._model import (
    EpochPlan,
    Marker,
    Participant,
    PartitionOutcome,
    PartitionReport,
    Resource,
    Rows,
    RowSummary,
    Vote,
    VoteKind,
)
from txn._steps import TaskStep

Gather = Callable[[Vote], Sequence[Vote]]
TaskHooks = Callable[[TaskStep, EpochPlan, int], None]
_COMMITTING = (VoteKind.YES, VoteKind.ALREADY_COMMITTED)


def run_partition(
    resource: Resource[Rows],
    plan: EpochPlan,
    partition: int,
    rows: Rows,
    *,
    gather: Gather | None = None,
    hooks: TaskHooks | None = None,
) -> PartitionReport:
    """Write ``rows`` as partition ``partition`` of ``plan`` (run inside the write task).

    Runs the task side of the protocol (docs/architecture.md, section 2): open (fencing
    older instances), read the marker, then skip, compare (``summarize``) or write
    (``begin``, ``write``, ``pre_commit``) and vote; with ``gather``, wait for every
    partition's vote and commit only if all are YES or ALREADY_COMMITTED; a
    coordinator-completable resource leaves its work prepared. ``close()`` always runs.

    Guarantees: nothing is committed unless the decision is commit; the rows are read at
    most once; a failure before the decision leaves nothing committed by this call and is
    re-raised after the votes (so every partition learns the outcome).
    """

    def hook(step: TaskStep) -> None:
        if hooks is not None:
            hooks(step, plan, partition)

    participant = resource.open(plan, partition)
    try:
        hook(TaskStep.OPENED)
        vote, summary, failure = _prepare(participant, plan, partition, rows, hook)
        if vote.kind is VoteKind.YES:
            hook(TaskStep.PRE_COMMITTED)
        votes = _gather(participant, plan, vote, gather)
        commit = all(v.kind in _COMMITTING for v in votes)
        hook(TaskStep.DECIDED)
        if failure is not None:
            raise failure
        return _finish(resource, participant, plan, vote, votes, summary, commit, hook)
    finally:
        participant.close()


def _prepare(
    participant: Participant[Rows],
    plan: EpochPlan,
    partition: int,
    rows: Rows,
    hook: Callable[[TaskStep], None],
) -> tuple[Vote, RowSummary, Exception | None]:
    """Run steps 2-4 of :func:`run_partition`: read the marker, then skip, compare or write."""
    summary = RowSummary(0, "")
    try:
        marker = participant.committed_marker()
        if marker is not None and marker.epoch > plan.epoch:
            return _vote(plan, partition, VoteKind.ALREADY_COMMITTED, summary), summary, None
        if marker is not None and marker.epoch == plan.epoch:
            summary = participant.summarize(rows)
            _check_replay(marker, summary, plan, partition)
            return _vote(plan, partition, VoteKind.ALREADY_COMMITTED, summary), summary, None
        participant.begin(plan.epoch)
        summary = participant.write(rows)
        hook(TaskStep.WRITTEN)
        participant.pre_commit(summary)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a NO vote
        error = f"{type(exc).__name__}: {exc}{_abort_quietly(participant)}"
        return _vote(plan, partition, VoteKind.NO, summary, error), summary, exc
    return _vote(plan, partition, VoteKind.YES, summary), summary, None


def _check_replay(marker: Marker, summary: RowSummary, plan: EpochPlan, partition: int) -> None:
    """Raise unless the replayed rows are the ones the marker says were committed."""
    if (marker.rows, marker.checksum) == (summary.rows, summary.checksum):
        return
    msg = (
        f"epoch {plan.epoch} partition {partition}: the replayed batch differs from "
        f"the committed one (committed rows={marker.rows} checksum={marker.checksum}, "
        f"replay rows={summary.rows} checksum={summary.checksum}); make the query "
        "deterministic (stable source offsets, no random or time-based columns, "
        "deterministic ordering) so a replay rewrites the same rows"
    )
    raise TxnError(msg, code=TxnCode.NON_DETERMINISTIC_REPLAY)


def _vote(
    plan: EpochPlan, partition: int, kind: VoteKind, summary: RowSummary, error: str | None = None
) -> Vote:
    return Vote(
        epoch=plan.epoch,
        partition=partition,
        kind=kind,
        rows=summary.rows,
        checksum=summary.checksum,
        error=error,
    )


def _abort_quietly(participant: Participant[Rows]) -> str:
    """Abort after a failure; return a note for the vote if the abort failed too."""
    try:
        participant.abort()
    except Exception as exc:  # noqa: BLE001 - the original failure is the one to report
        return f" (the abort that followed failed too: {type(exc).__name__}: {exc})"
    return ""


def _gather(
    participant: Participant[Rows], plan: EpochPlan, vote: Vote, gather: Gather | None
) -> tuple[Vote, ...]:
    if gather is None:
        return (vote,)
    try:
        votes = tuple(gather(vote))
    except Exception as exc:
        participant.abort()
        msg = (
            f"epoch {plan.epoch} partition {vote.partition}: gathering votes failed ({exc}); "
            "this partition's work was aborted and the epoch stays in doubt for a retry"
        )
        raise TxnError(msg, code=TxnCode.PARTICIPANT) from exc
    if sorted(v.partition for v in votes) != list(range(plan.parallelism)) or any(
        v.epoch != plan.epoch for v in votes
    ):
        participant.abort()
        msg = (
            f"epoch {plan.epoch}: the vote channel returned votes {votes}, not one vote of "
            f"this epoch per partition 0..{plan.parallelism - 1}; the vote channel is broken"
        )
        raise TxnError(msg, code=TxnCode.PARTICIPANT)
    return votes


def _finish(
    resource: Resource[Rows],
    participant: Participant[Rows],
    plan: EpochPlan,
    vote: Vote,
    votes: tuple[Vote, ...],
    summary: RowSummary,
    commit: bool,
    hook: Callable[[TaskStep], None],
) -> PartitionReport:
    def report(outcome: PartitionOutcome, error: str | None = None) -> PartitionReport:
        return PartitionReport(
            epoch=plan.epoch,
            partition=vote.partition,
            outcome=outcome,
            rows=summary.rows,
            checksum=summary.checksum,
            error=error,
            votes=votes,
        )

    if vote.kind is VoteKind.ALREADY_COMMITTED:
        return report(PartitionOutcome.ALREADY_COMMITTED)
    if not commit:
        participant.abort()
        hook(TaskStep.ABORTED)
        blame = next((v for v in votes if v.kind not in _COMMITTING), None)
        why = f"partition {blame.partition} voted no: {blame.error}" if blame else "vote no"
        return report(PartitionOutcome.ABORTED, why)
    if resource.completes(vote.partition):
        return report(PartitionOutcome.PREPARED)
    participant.commit()
    hook(TaskStep.COMMITTED)
    return report(PartitionOutcome.COMMITTED)
