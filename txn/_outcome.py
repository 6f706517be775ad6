"""What an epoch run comes to: its result, a recovery's report, the partitions to blame."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from txn._errors import TxnCode, TxnError
from txn._model import EpochPlan, PartitionOutcome, PartitionReport

# Reports of a partition whose effect is durable, and of one the coordinator may commit.
DONE = (PartitionOutcome.COMMITTED, PartitionOutcome.ALREADY_COMMITTED)
READY = (PartitionOutcome.PREPARED, PartitionOutcome.ALREADY_COMMITTED)


@dataclass(frozen=True, kw_only=True)
class EpochResult:
    """Outcome of :meth:`Coordinator.run_epoch`.

    ``skipped``: the write stage did not run (the epoch was already committed, or an
    earlier attempt's logged commit decision was finished). ``committed``: the epoch's
    effect is applied (for at-most-once: the epoch is given up as done, applied or not).
    """

    epoch: int
    plan: EpochPlan | None
    skipped: bool
    committed: bool
    reports: tuple[PartitionReport, ...] = ()


@dataclass(frozen=True, kw_only=True)
class RecoveryReport:
    """What :meth:`Coordinator.recover` did."""

    committed: tuple[int, ...] = ()  # in-doubt epochs finished by committing prepared work
    rolled_back: tuple[int, ...] = ()  # in-doubt epochs rolled back (no commit decision)
    awaiting_replay: tuple[int, ...] = ()  # epochs left for the replay to redo (partly)
    lingering_partitions: tuple[int, ...] = ()  # partitions whose lingering work was aborted


def lost_error(plan: EpochPlan, partitions: tuple[int, ...], why: str = "") -> TxnError:
    """Return the error of a commit decision that lost prepared work did not reach."""
    detail = f" ({why})" if why else ""
    msg = (
        f"epoch {plan.epoch} was decided commit, but partitions {list(partitions)} are not "
        f"committed (their prepared work was lost, or its redo failed{detail}); the decision "
        "stays logged and the replay of the epoch redoes them (replay it: restart the query)"
    )
    return TxnError(msg, code=TxnCode.EPOCH_ABORTED)


def blame(reports: Sequence[PartitionReport]) -> str:
    """Name the partitions that kept the epoch from committing, with their errors."""
    bad = [r for r in reports if r.outcome not in READY and r.outcome not in DONE]
    bad = bad or [r for r in reports if r.outcome is PartitionOutcome.PREPARED]
    return "; ".join(f"partition {r.partition}: {r.outcome.value} {r.error or ''}" for r in bad)
