"""The task-side driver of one write partition for one epoch (engine agnostic)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from txn._errors import NonDeterministicReplayError, ParticipantError
from txn._model import (
    EpochPlan,
    Participant,
    PartitionOutcome,
    PartitionReport,
    Resource,
    Rows,
    RowSummary,
    Vote,
    VoteKind,
)


class TaskStep(str, enum.Enum):
    """Points of :func:`run_partition` where ``hooks`` are called (crash injection)."""

    OPENED = "opened"  # participant created (older instances fenced), marker not read
    PRE_COMMITTED = "pre-committed"  # pre_commit returned, the yes vote not sent
    DECIDED = "decided"  # votes gathered, decision known, nothing committed or aborted
    COMMITTED = "committed"  # commit returned, report not yet returned (before the ack)
    ABORTED = "aborted"  # abort after a no decision returned


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

    Protocol:

    1. ``participant = resource.open(plan, partition)`` (fences older instances);
    2. read the marker and summarize the rows;
    3. a marker of this epoch with the same (rows, checksum) means this partition already
       committed it: vote ALREADY_COMMITTED (a different summary raises
       :class:`~txn.NonDeterministicReplayError`); a marker of a later epoch also votes
       ALREADY_COMMITTED;
    4. otherwise ``begin``, ``write``, ``pre_commit`` and vote YES; any failure aborts and
       votes NO (the failure is raised after the decision, so Spark retries);
    5. aligned (``gather`` given): ``gather(vote)`` blocks until every partition voted and
       returns all votes; commit iff every partition 0..P-1 voted YES or ALREADY_COMMITTED.
       Unaligned: decide on the own vote;
    6. coordinator-completable resources leave the work prepared (report PREPARED); others
       commit or abort here. ``participant.close()`` always runs.

    Guarantees: nothing is committed unless the decision is commit; a failure before the
    decision leaves nothing committed by this call.
    """

    def hook(step: TaskStep) -> None:
        if hooks is not None:
            hooks(step, plan, partition)

    participant = resource.open(plan, partition)
    try:
        hook(TaskStep.OPENED)
        vote, summary, failure = _prepare(participant, plan, partition, rows)
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
    participant: Participant[Rows], plan: EpochPlan, partition: int, rows: Rows
) -> tuple[Vote, RowSummary, Exception | None]:
    summary = RowSummary(0, "")
    try:
        marker = participant.committed_marker()
        summary = participant.summarize(rows)
        if marker is not None and marker.epoch == plan.epoch:
            if (marker.rows, marker.checksum) != (summary.rows, summary.checksum):
                msg = (
                    f"epoch {plan.epoch} partition {partition}: the replayed batch differs from "
                    f"the committed one (committed rows={marker.rows} checksum="
                    f"{marker.checksum}, replay rows={summary.rows} checksum={summary.checksum})"
                    "; make the query deterministic (stable source offsets, no random or "
                    "time-based columns, deterministic ordering) so a replay rewrites the same "
                    "rows"
                )
                raise NonDeterministicReplayError(msg)
            return _vote(plan, partition, VoteKind.ALREADY_COMMITTED, summary), summary, None
        if marker is not None and marker.epoch > plan.epoch:
            return _vote(plan, partition, VoteKind.ALREADY_COMMITTED, summary), summary, None
        participant.begin(plan.epoch)
        participant.write(rows)
        participant.pre_commit(summary)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a NO vote
        error = f"{type(exc).__name__}: {exc}{_abort_quietly(participant)}"
        return _vote(plan, partition, VoteKind.NO, summary, error), summary, exc
    return _vote(plan, partition, VoteKind.YES, summary), summary, None


def _vote(
    plan: EpochPlan, partition: int, kind: VoteKind, summary: RowSummary, error: str | None = None
) -> Vote:
    return Vote(plan.epoch, partition, kind, summary.rows, summary.checksum, error)


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
        raise ParticipantError(msg) from exc
    if sorted(v.partition for v in votes) != list(range(plan.parallelism)) or any(
        v.epoch != plan.epoch for v in votes
    ):
        participant.abort()
        msg = (
            f"epoch {plan.epoch}: the vote channel returned votes {votes}, not one vote of "
            f"this epoch per partition 0..{plan.parallelism - 1}; the vote channel is broken"
        )
        raise ParticipantError(msg)
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
            plan.epoch, vote.partition, outcome, summary.rows, summary.checksum, error, votes
        )

    if vote.kind is VoteKind.ALREADY_COMMITTED:
        return report(PartitionOutcome.ALREADY_COMMITTED)
    if not commit:
        participant.abort()
        hook(TaskStep.ABORTED)
        blame = next((v for v in votes if v.kind not in _COMMITTING), None)
        why = f"partition {blame.partition} voted no: {blame.error}" if blame else "vote no"
        return report(PartitionOutcome.ABORTED, why)
    if resource.completable_by_coordinator:
        return report(PartitionOutcome.PREPARED)
    participant.commit()
    hook(TaskStep.COMMITTED)
    return report(PartitionOutcome.COMMITTED)
