"""A commit decision that meets lost prepared work: kept, and the replay redoes the partition.

Prepared work can be gone when the coordinator commits it: rolled back by hand, or never
there (the stage of release 0.x made up PREPARED reports for an empty batch Spark ran no
task for). Then the decision stays logged (never an abort after it), the rest is
committed, and the replay of the epoch redoes the lost partitions under a redo plan
(docs/architecture.md, "Lost prepared work"). A log that already holds such a wedged
epoch recovers without manual repair.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from txn import (
    CommitMode,
    CoordinatorStep,
    EpochCompletion,
    EpochHistory,
    EpochPlan,
    EpochState,
    FileEpochLog,
    PartitionReport,
    TaskStep,
    TxnCode,
    TxnError,
    has_code,
)
from txn._model import EpochDecision, PartitionOutcome
from txn.testing import MIXED, PG_LIKE, SHAPES, Crash, MemoryWorld
from txn.testing._memworld import MIXED_SPLIT, SINK, Loss

C = CoordinatorStep
REDO_CRASHES = (
    "no-crash",
    "after-redo-plan",
    "after-redo-reports",
    "in-redo-delivery",
    "after-redo-completion",
    "redo-task-after-pre-commit",
)


def redo_crash(case: str, kind: str, lost: int) -> Crash | None:
    """The crash of ``case`` during the redo of epoch 1 (counted from the epoch's start)."""
    width = MIXED_SPLIT[1] if kind == MIXED else 3  # prepared partitions: deliveries per round
    return {
        "no-crash": None,
        "after-redo-plan": Crash(where="coordinator", step=C.PLAN_LOGGED, after=2),
        "after-redo-reports": Crash(where="coordinator", step=C.REPORTS_RECEIVED, after=2),
        # delivery rounds before the redo's: the decision's, recovery's, the replay's
        "in-redo-delivery": Crash(
            where="coordinator", step=C.PARTITION_DELIVERED, after=3 * width + 1
        ),
        "after-redo-completion": Crash(where="coordinator", step=C.COMPLETED),
        "redo-task-after-pre-commit": Crash(
            where="task", step=TaskStep.PRE_COMMITTED, partition=lost, after=2
        ),
    }[case]


def _params() -> list[object]:
    out: list[object] = []
    for kind in (PG_LIKE, MIXED):
        for mode in CommitMode:
            for shape in SHAPES:
                for case in REDO_CRASHES:
                    out.append(
                        pytest.param(
                            kind, mode, shape, case, id=f"{kind}-{mode.value}-{shape}-{case}"
                        )
                    )
    return out


@pytest.mark.parametrize(("kind", "mode", "shape", "case"), _params())
def test_lost_prepared_work_is_redone_by_the_replay(
    tmp_path: Path, kind: str, mode: CommitMode, shape: str, case: str
) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind, mode=mode, shape=shape)
    lost = MIXED_SPLIT[0] if kind == MIXED else 1  # a prepared (PG-like) partition
    world.losses = [Loss(epoch=1, partition=lost)]
    crash = redo_crash(case, kind, lost)
    world.crashes = [crash] if crash is not None else []
    world.run_epochs(3)
    assert world.losses[0].fired
    assert all(c.fired == c.times for c in world.crashes), "a crash never fired"
    assert world.restarts >= 1
    world.check_exactly_once(3)
    history = world.history()
    plan = history.plan(1)
    assert plan is not None and plan.attempt >= 1, "the lost partition was not redone"
    decision = history.decision(1)
    assert decision is not None and decision.commit  # the first decision, kept by the redo


def _made_up_reports(plan: EpochPlan) -> Sequence[PartitionReport]:
    """What the stage of the current release returned when Spark ran no task (no work)."""
    return [
        PartitionReport(epoch=plan.epoch, partition=p, outcome=PartitionOutcome.PREPARED)
        for p in range(plan.parallelism)
    ]


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
def test_a_wedged_log_of_the_current_release_recovers(tmp_path: Path, mode: CommitMode) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=PG_LIKE, mode=mode, shape="empty")
    world.run_epoch(0)
    assert world.coordinator is not None
    with pytest.raises(
        TxnError, match="decided commit", check=lambda e: e.code is TxnCode.EPOCH_ABORTED
    ):
        world.coordinator.run_epoch(1, world.parallelism, _made_up_reports)
    world.crash()
    with FileEpochLog(world.log_path, sink_id=SINK) as log:  # the wedged state
        assert log.load().state(1) is EpochState.COMMIT_DECIDED
    coordinator = world.start()
    report = coordinator.recover()
    assert report.awaiting_replay == (1,) and report.committed == ()
    world.run_epochs(3)  # the replay of batch 1, then batch 2
    world.check_exactly_once(3)


def test_a_failing_redo_never_aborts_the_decided_epoch(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=PG_LIKE)
    world.losses = [Loss(epoch=1, partition=0)]
    world.run_epoch(0)
    assert world.coordinator is not None
    with pytest.raises(
        TxnError, match=r"partitions \[0\]", check=lambda e: e.code is TxnCode.EPOCH_ABORTED
    ):
        world.coordinator.run_epoch(1, world.parallelism, world.executor())
    world.store.fail_write(1, 0)
    for _ in range(2):  # the redo fails: the decision stays, the commits stay
        with pytest.raises(
            TxnError, match="injected write failure", check=lambda e: e.code is TxnCode.PARTICIPANT
        ):
            world.coordinator.run_epoch(1, world.parallelism, world.executor())
        history = world.history()
        assert history.state(1) is EpochState.COMMIT_DECIDED
        decision = history.decision(1)
        assert decision is not None and decision.commit
    assert sorted(c.partition for c in world.store.commits if c.epoch == 1) == [1, 2]
    assert world.store.dangling() == []
    world.store.heal_write(1, 0)
    assert world.coordinator.run_epoch(1, world.parallelism, world.executor()).committed
    world.run_epochs(3)
    world.check_exactly_once(3)


def test_recover_leaves_lost_partitions_for_the_replay(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=PG_LIKE)
    world.losses = [Loss(epoch=1, partition=2, step=C.REPORTS_RECEIVED)]
    world.crashes = [Crash(where="coordinator", step=C.DECISION_LOGGED)]
    world.run_epoch(0)
    assert world.coordinator is not None
    with pytest.raises(BaseException, match="crash at"):
        world.coordinator.run_epoch(1, world.parallelism, world.executor())
    world.crash()
    coordinator = world.start()  # recover() in start(): commits 0 and 1, leaves 2
    assert coordinator.recover().awaiting_replay == (1,)
    assert sorted(c.partition for c in world.store.commits if c.epoch == 1) == [0, 1]
    world.run_epochs(3)
    world.check_exactly_once(3)


# -- the history's rules for a redo plan -----------------------------------------------------
def _decided(parallelism: int = 2) -> EpochHistory:
    plan = EpochPlan(sink_id=SINK, epoch=0, parallelism=parallelism, fingerprint="v1")
    return EpochHistory.from_records(
        [plan, EpochDecision(sink_id=SINK, epoch=0, commit=True)], sink_id=SINK
    )


def test_a_redo_plan_keeps_the_commit_decision() -> None:
    redo = EpochPlan(sink_id=SINK, epoch=0, parallelism=2, fingerprint="v1", attempt=1)
    history = _decided().with_record(redo)
    assert history.state(0) is EpochState.COMMIT_DECIDED and history.plan(0) == redo
    decision = history.decision(0)
    assert decision is not None and decision.commit
    done = history.with_record(EpochCompletion(SINK, 0, committed=True))
    assert done.is_committed(0)


@pytest.mark.parametrize(
    "record",
    [
        EpochPlan(
            sink_id=SINK, epoch=0, parallelism=3, fingerprint="v1", attempt=1
        ),  # another parallelism
        EpochPlan(
            sink_id=SINK, epoch=0, parallelism=2, fingerprint="v2", attempt=1
        ),  # another fingerprint
        EpochPlan(
            sink_id=SINK, epoch=0, parallelism=2, fingerprint="v1", attempt=2
        ),  # skips an attempt
    ],
    ids=["parallelism", "fingerprint", "attempt"],
)
def test_a_redo_plan_is_pinned(record: EpochPlan) -> None:
    with pytest.raises(TxnError, check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION):
        _decided().with_record(record)


@pytest.mark.parametrize(
    "record",
    [
        EpochDecision(sink_id=SINK, epoch=0, commit=False),
        EpochCompletion(SINK, 0, committed=False),
    ],
    ids=["abort-decision", "aborted-completion"],
)
def test_no_abort_after_a_redo_plan(record: EpochDecision | EpochCompletion) -> None:
    history = _decided().with_record(
        EpochPlan(sink_id=SINK, epoch=0, parallelism=2, fingerprint="v1", attempt=1)
    )
    with pytest.raises(TxnError, check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION):
        history.with_record(record)


def test_the_lost_work_error_survives_pickling() -> None:
    import pickle

    back = pickle.loads(
        pickle.dumps(TxnError("gone", partition=4, code=TxnCode.PREPARED_WORK_LOST))
    )
    assert (
        has_code(back, TxnCode.PREPARED_WORK_LOST)
        and str(back) == "[prepared-work-lost] gone"
        and back.partition == 4
    )
