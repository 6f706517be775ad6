"""Coordinator and task-driver behaviour beyond the crash matrix."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from txn import (
    CommitMode,
    Coordinator,
    CoordinatorStep,
    EpochCompletion,
    EpochPlan,
    EpochResult,
    FileEpochLog,
    Guarantee,
    Marker,
    Participant,
    PartitionReport,
    Resource,
    RowSummary,
    TaskStep,
    TxnCode,
    TxnError,
    Vote,
)
from txn._executor import InProcessExecutor
from txn._model import EpochDecision, PartitionOutcome, VoteKind
from txn._outcome import RecoveryReport
from txn._task import run_partition
from txn.testing import (
    KAFKA_LIKE,
    KINDS,
    MIXED,
    PG_LIKE,
    CommitInTaskResource,
    Crash,
    MemoryStore,
    MemoryWorld,
    PreparedResource,
    epoch_rows,
)
from txn.testing._memworld import SINK
from txn.testing._participants import OnePassRows, partition_rows, summarize_rows


def _crash_epoch_one(world: MemoryWorld, crash: Crash) -> None:
    """Run epoch 0, then crash inside epoch 1 and leave the driver dead."""
    world.run_epoch(0)
    world.crashes = [crash]
    assert world.coordinator is not None
    with pytest.raises(BaseException, match="crash at"):
        world.coordinator.run_epoch(1, world.parallelism, world.executor())
    world.crash()


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
def test_non_deterministic_replay_is_detected(tmp_path: Path, mode: CommitMode) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=KAFKA_LIKE, mode=mode)
    _crash_epoch_one(world, Crash(where="task", step=TaskStep.DECIDED, partition=1))
    coordinator = world.start()
    assert world.resource is not None
    changed = InProcessExecutor(
        world.resource,
        lambda plan, p: OnePassRows(partition_rows([*epoch_rows(1), "extra"], plan.parallelism)[p]),
    )
    with pytest.raises(
        TxnError, check=lambda e: e.code is TxnCode.NON_DETERMINISTIC_REPLAY
    ) as info:
        coordinator.run_epoch(1, world.parallelism, changed)
    text = str(info.value)
    assert "epoch 1" in text and "replay rows=" in text and "committed rows=" in text
    assert "make the query deterministic" in text
    assert world.store.dangling() == []
    # the deterministic replay still completes the epoch exactly once
    world.crash()
    world.run_epochs(3)
    world.check_exactly_once(3)


@pytest.mark.parametrize("kind", [KAFKA_LIKE, PG_LIKE])  # a composite's split is its own
def test_in_doubt_epoch_keeps_its_planned_parallelism(tmp_path: Path, kind: str) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind, mode=CommitMode.UNALIGNED)
    _crash_epoch_one(world, Crash(where="coordinator", step=CoordinatorStep.REPORTS_RECEIVED))
    world.parallelism = 5  # the user resized the cluster meanwhile
    result = world.run_epoch(1)
    assert result.plan is not None and result.plan.attempt >= 1
    if kind == KAFKA_LIKE:  # partly committed: the redo must use the same partitions
        assert result.plan.parallelism == 3
    else:  # 2PC: recovery rolled the epoch back, nothing visible, so it may be re-planned
        assert result.plan.parallelism == 5
    world.run_epoch(2)  # a new epoch uses the new parallelism
    assert world.log is not None
    plan2 = world.log.load().plan(2)
    assert plan2 is not None and plan2.parallelism == 5
    world.parallelism = result.plan.parallelism
    world.check_exactly_once(3)


def test_fingerprint_change_while_in_doubt_is_refused(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    _crash_epoch_one(world, Crash(where="task", step=TaskStep.DECIDED, partition=1))
    with FileEpochLog(world.log_path, sink_id=SINK) as log:
        resource = world.new_resource(fingerprint="v2")
        coordinator = Coordinator(log, resource, sink_id=SINK)
        coordinator.recover()
        with pytest.raises(
            TxnError,
            match="sink configuration changed",
            check=lambda e: e.code is TxnCode.PLAN_MISMATCH,
        ):
            coordinator.run_epoch(1, 3, InProcessExecutor(resource, lambda plan, p: []))
    world.run_epochs(3)  # with the old configuration it completes
    world.check_exactly_once(3)


def test_fingerprint_change_after_two_phase_rollback_is_allowed(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=PG_LIKE)
    _crash_epoch_one(world, Crash(where="coordinator", step=CoordinatorStep.REPORTS_RECEIVED))
    with FileEpochLog(world.log_path, sink_id=SINK) as log:
        resource = world.new_resource(fingerprint="v2")
        coordinator = Coordinator(log, resource, sink_id=SINK)  # no recover(): run_epoch resolves
        executor = InProcessExecutor(
            resource,
            lambda plan, p: OnePassRows(partition_rows(epoch_rows(1), plan.parallelism)[p]),
        )
        result = coordinator.run_epoch(1, 3, executor)
        assert result.committed and result.plan is not None
        assert result.plan.fingerprint == "v2" and result.plan.attempt == 1
    assert sorted(world.store.rows_by_epoch()[1]) == sorted(epoch_rows(1))
    assert world.store.dangling() == []


def test_guarantee_change_while_in_doubt_is_refused(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    _crash_epoch_one(world, Crash(where="coordinator", step=CoordinatorStep.PLAN_LOGGED))
    world.guarantee = Guarantee.AT_LEAST_ONCE
    with pytest.raises(
        TxnError, match="keep the old settings", check=lambda e: e.code is TxnCode.PLAN_MISMATCH
    ):
        world.run_epoch(1)


@pytest.mark.parametrize("kind", KINDS)
def test_at_most_once_logs_completion_before_execute(tmp_path: Path, kind: str) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind, guarantee=Guarantee.AT_MOST_ONCE)
    world.start()
    seen: list[bool] = []
    assert world.log is not None and world.coordinator is not None
    log = world.log

    def execute(plan: EpochPlan) -> Sequence[PartitionReport]:
        seen.append(log.load().is_committed(plan.epoch))
        raise SimulatedWriteFailure

    with pytest.raises(SimulatedWriteFailure):
        world.coordinator.run_epoch(0, 3, execute)
    assert seen == [True]
    # the replay of the failed epoch is skipped: lost, never duplicated
    assert world.coordinator.run_epoch(0, 3, execute).skipped
    world.crashes = [Crash(where="task", step=TaskStep.PRE_COMMITTED, partition=1, epoch=1)]
    world.run_epochs(3)
    got = world.store.rows_by_epoch()
    assert 0 not in got and sorted(got[2]) == sorted(epoch_rows(2))
    assert len(got.get(1, [])) <= len(epoch_rows(1))  # epoch 1 may be partly lost, no duplicates
    assert len(set(got.get(1, []))) == len(got.get(1, []))
    world.crash()
    world.start()  # recovery cleans up what the crashed task left open or prepared
    assert world.store.dangling() == []


class SimulatedWriteFailure(Exception):
    pass


@pytest.mark.parametrize("kind", KINDS)
def test_at_least_once_skips_logged_epochs_and_redoes_unlogged(tmp_path: Path, kind: str) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind, guarantee=Guarantee.AT_LEAST_ONCE)
    world.crashes = [Crash(where="coordinator", step=CoordinatorStep.REPORTS_RECEIVED)]
    world.run_epochs(3)
    assert world.crashes[0].fired == 1
    calls: list[int] = []

    def execute(plan: EpochPlan) -> Sequence[PartitionReport]:
        calls.append(plan.epoch)
        return []

    assert world.coordinator is not None
    for epoch in range(3):
        result = world.coordinator.run_epoch(epoch, 3, execute)
        assert result.skipped and result.committed
    assert calls == []
    got = world.store.rows_by_epoch()
    for epoch in range(3):  # nothing lost (duplicates would be allowed)
        assert set(got[epoch]) == set(epoch_rows(epoch))


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
@pytest.mark.parametrize("kind", [KAFKA_LIKE, PG_LIKE])
def test_a_no_vote_aborts_or_leaves_the_epoch_in_doubt(
    tmp_path: Path, kind: str, mode: CommitMode
) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind, mode=mode)
    world.run_epoch(0)
    world.store.fail_writes.add((1, 1))
    assert world.coordinator is not None
    with pytest.raises(
        TxnError, match="injected write failure", check=lambda e: e.code is TxnCode.PARTICIPANT
    ):
        world.coordinator.run_epoch(1, 3, world.executor())
    committed_p = {c.partition for c in world.store.commits if c.epoch == 1}
    if mode is CommitMode.ALIGNED or kind == PG_LIKE:
        assert committed_p == set()  # nobody committed: the vote was gathered / not decided
    else:
        assert committed_p == {0, 2}  # unaligned commit-in-task: partly visible until replay
    world.store.fail_writes.clear()
    world.run_epochs(3)
    world.check_exactly_once(3)


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
@pytest.mark.parametrize("failing", ["kafka-like", "pg-like"])
def test_mixed_epoch_commits_the_prepared_side_only_after_the_task_side(
    tmp_path: Path, mode: CommitMode, failing: str
) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=MIXED, mode=mode)
    world.run_epoch(0)
    store = world.store if failing == "kafka-like" else world.pg_store
    store.fail_writes.add((1, 1))  # local partition 1 of the failing member
    assert world.coordinator is not None
    with pytest.raises(
        TxnError, match="injected write failure", check=lambda e: e.code is TxnCode.PARTICIPANT
    ):
        world.coordinator.run_epoch(1, world.parallelism, world.executor())
    kafka_epoch1 = {c.partition for c in world.store.commits if c.epoch == 1}
    assert [c for c in world.pg_store.commits if c.epoch == 1] == []  # the table: nothing
    assert world.pg_store.dangling() == []  # and nothing left prepared
    if mode is CommitMode.ALIGNED:
        assert kafka_epoch1 == set()  # one vote was no: nobody committed
    else:
        assert kafka_epoch1 == ({0} if failing == "kafka-like" else {0, 1})
    assert world.log is not None and world.log.load().in_doubt() != []
    store.fail_writes.clear()
    world.run_epochs(3)
    world.check_exactly_once(3)


def test_mixed_recovery_with_a_logged_decision_commits_the_prepared_side(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=MIXED)
    world.crashes = [Crash(where="coordinator", step=CoordinatorStep.DECISION_LOGGED)]
    world.run_epochs(2)
    assert world.crashes[0].fired == 1
    world.check_exactly_once(2)
    assert [m for m in world.after_recover if m] == []


def test_aligned_abort_reports_the_culprit(tmp_path: Path) -> None:
    store = MemoryStore()
    store.fail_writes.add((0, 2))
    resource = CommitInTaskResource(store)
    executor = InProcessExecutor(resource, lambda plan, p: [f"r{p}"])
    plan = EpochPlan(sink_id=SINK, epoch=0, parallelism=3, fingerprint="v1")
    with pytest.raises(TxnError, match="injected", check=lambda e: e.code is TxnCode.PARTICIPANT):
        executor(plan)
    assert store.commits == [] and store.dangling() == []
    run = InProcessExecutor(resource, lambda plan, p: [f"r{p}"])
    store.fail_writes.clear()
    reports = run(plan)
    assert [r.outcome for r in reports] == [PartitionOutcome.COMMITTED] * 3
    assert all(len(r.votes) == 3 for r in reports)


@pytest.mark.parametrize("kind", [KAFKA_LIKE, PG_LIKE])
def test_recover_aborts_lingering_work_of_every_partition_ever_used(
    tmp_path: Path, kind: str
) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind, parallelism=4)
    world.run_epochs(2)
    # a dead task of a later, never-logged attempt left work behind on partition 3
    assert world.resource is not None
    zombie = world.resource.open(
        EpochPlan(sink_id=SINK, epoch=2, parallelism=4, fingerprint="v1"), 3
    )
    zombie.begin(2)
    zombie.write(["stray"])
    zombie.pre_commit(RowSummary(1, "x"))
    assert world.store.dangling() != []
    world.crash()
    coordinator = world.start()
    assert world.store.dangling() == []
    assert coordinator.recover().lingering_partitions == (0, 1, 2, 3)


@pytest.mark.parametrize("kind", KINDS)
def test_shrinking_parallelism_aborts_lingering_work_beyond_it(tmp_path: Path, kind: str) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind, parallelism=3)
    world.run_epochs(1)
    assert world.resource is not None
    zombie = world.resource.open(
        EpochPlan(sink_id=SINK, epoch=1, parallelism=3, fingerprint="v1"), 2
    )
    zombie.begin(1)
    zombie.write(["stray"])
    zombie.pre_commit(RowSummary(1, "x"))
    world.parallelism = 2
    world.run_epoch(1)
    assert world.store.dangling() == []
    assert "stray" not in world.store.rows_by_epoch().get(1, [])


def test_recovery_report_for_two_phase_commit(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=PG_LIKE)
    _crash_epoch_one(world, Crash(where="coordinator", step=CoordinatorStep.DECISION_LOGGED))
    with FileEpochLog(world.log_path, sink_id=SINK) as log:
        report = Coordinator(log, PreparedResource(world.store), sink_id=SINK).recover()
        assert report.committed == (1,) and report.rolled_back == ()
        assert log.load().is_committed(1)
    assert sorted(world.store.rows_by_epoch()[1]) == sorted(epoch_rows(1))


def test_recovery_rolls_back_without_decision_and_replans(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=PG_LIKE)
    _crash_epoch_one(world, Crash(where="coordinator", step=CoordinatorStep.REPORTS_RECEIVED))
    assert len(world.store.prepared) == 3
    with FileEpochLog(world.log_path, sink_id=SINK) as log:
        report = Coordinator(log, PreparedResource(world.store), sink_id=SINK).recover()
        assert report.rolled_back == (1,)
        assert world.store.prepared == {}
    result = world.run_epoch(1)
    assert result.plan is not None and result.plan.attempt == 1 and not result.skipped


def test_commit_in_task_recovery_leaves_epoch_for_replay(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    _crash_epoch_one(world, Crash(where="task", step=TaskStep.DECIDED, partition=1))
    with FileEpochLog(world.log_path, sink_id=SINK) as log:
        report = Coordinator(log, CommitInTaskResource(world.store), sink_id=SINK).recover()
        assert report.awaiting_replay == (1,)
        assert not log.load().is_committed(1)


def test_run_partition_votes_already_committed_for_a_later_marker() -> None:
    store = MemoryStore()
    store.markers[0] = Marker(epoch=5, rows=1, checksum="c")
    report = run_partition(
        CommitInTaskResource(store),
        EpochPlan(sink_id=SINK, epoch=4, parallelism=1, fingerprint="v1"),
        0,
        ["a"],
    )
    assert report.outcome is PartitionOutcome.ALREADY_COMMITTED
    assert store.commits == []


def test_run_partition_rejects_a_broken_vote_channel() -> None:
    store = MemoryStore()
    plan = EpochPlan(sink_id=SINK, epoch=0, parallelism=2, fingerprint="v1")
    with pytest.raises(
        TxnError, match="vote channel is broken", check=lambda e: e.code is TxnCode.PARTICIPANT
    ):
        run_partition(CommitInTaskResource(store), plan, 0, ["a"], gather=lambda v: [v])
    assert store.commits == [] and store.dangling() == []


def test_config_errors_say_what_to_fix(tmp_path: Path) -> None:
    store = MemoryStore()
    with FileEpochLog(tmp_path / "log", sink_id=SINK) as log:
        with pytest.raises(
            TxnError, match="belongs to sink", check=lambda e: e.code is TxnCode.CONFIG
        ):
            Coordinator(log, CommitInTaskResource(store), sink_id="other")
        with pytest.raises(
            TxnError, match="unknown guarantee", check=lambda e: e.code is TxnCode.CONFIG
        ):
            Coordinator(log, CommitInTaskResource(store), sink_id=SINK, guarantee="twice")
        with pytest.raises(
            TxnError, match="unknown commit mode", check=lambda e: e.code is TxnCode.CONFIG
        ):
            Coordinator(log, CommitInTaskResource(store), sink_id=SINK, mode="sometimes")
        coordinator = Coordinator(log, CommitInTaskResource(store), sink_id=SINK)
        with pytest.raises(
            TxnError,
            match="parallelism must be an int >= 1",
            check=lambda e: e.code is TxnCode.CONFIG,
        ):
            coordinator.run_epoch(0, 0, lambda plan: [])
        with pytest.raises(
            TxnError, match="epoch must be an int >= 0", check=lambda e: e.code is TxnCode.CONFIG
        ):
            coordinator.run_epoch(-1, 1, lambda plan: [])
    with pytest.raises(TxnError, match="sink_id", check=lambda e: e.code is TxnCode.CONFIG):
        FileEpochLog(tmp_path / "log2", sink_id="")


def test_execute_returning_wrong_reports_is_refused(tmp_path: Path) -> None:
    with FileEpochLog(tmp_path / "log", sink_id=SINK) as log:
        coordinator = Coordinator(log, CommitInTaskResource(MemoryStore()), sink_id=SINK)
        with pytest.raises(
            TxnError,
            match="execute callable is broken",
            check=lambda e: e.code is TxnCode.PARTICIPANT,
        ):
            coordinator.run_epoch(0, 2, lambda plan: [])
        assert log.load().in_doubt() != []
        with pytest.raises(
            TxnError, match="stays in doubt", check=lambda e: e.code is TxnCode.EPOCH_ABORTED
        ):
            coordinator.run_epoch(
                0,
                2,
                lambda plan: [
                    PartitionReport(epoch=0, partition=0, outcome=PartitionOutcome.COMMITTED),
                    PartitionReport(
                        epoch=0, partition=1, outcome=PartitionOutcome.ABORTED, error="boom"
                    ),
                ],
            )
        assert log.load().plan(0) is not None and not log.load().is_committed(0)


SAMPLES: list[object] = [
    EpochPlan(
        sink_id=SINK,
        epoch=3,
        parallelism=4,
        fingerprint="fp",
        guarantee=Guarantee.AT_LEAST_ONCE,
        mode=CommitMode.UNALIGNED,
        attempt=2,
    ),
    EpochDecision(sink_id=SINK, epoch=3, commit=False, reason="p1 voted no"),
    EpochCompletion(SINK, 3, committed=True),
    Marker(3, 10, "abc"),
    RowSummary(10, "abc"),
    Vote(epoch=3, partition=1, kind=VoteKind.NO, rows=0, checksum="", error="boom"),
    PartitionReport(
        epoch=3,
        partition=1,
        outcome=PartitionOutcome.PREPARED,
        rows=4,
        checksum="c",
        error=None,
        votes=(Vote(epoch=3, partition=1, kind=VoteKind.YES),),
    ),
    EpochResult(
        epoch=3,
        plan=EpochPlan(sink_id=SINK, epoch=3, parallelism=1, fingerprint="fp"),
        skipped=False,
        committed=True,
    ),
    RecoveryReport(
        committed=(1,), rolled_back=(2,), awaiting_replay=(3,), lingering_partitions=(0, 1)
    ),
    Guarantee.EXACTLY_ONCE,
    CommitMode.ALIGNED,
]


@pytest.mark.parametrize("obj", SAMPLES, ids=lambda o: type(o).__name__)
def test_pickle_round_trip(obj: object) -> None:
    assert pickle.loads(pickle.dumps(obj)) == obj


def test_dataclasses_are_frozen() -> None:
    plan = EpochPlan(sink_id=SINK, epoch=0, parallelism=1, fingerprint="fp")
    with pytest.raises(AttributeError):
        plan.epoch = 2  # type: ignore[misc]
    assert replace(plan, attempt=1).attempt == 1


class _RecordingParticipant(Participant[OnePassRows]):
    """Records the contract calls run_partition makes; the marker is given."""

    def __init__(self, marker: Marker | None) -> None:
        self.marker = marker
        self.calls: list[str] = []

    def committed_marker(self) -> Marker | None:
        self.calls.append("committed_marker")
        return self.marker

    def summarize(self, rows: OnePassRows) -> RowSummary:
        self.calls.append("summarize")
        return summarize_rows(rows.read())

    def begin(self, epoch: int) -> None:
        self.calls.append("begin")

    def write(self, rows: OnePassRows) -> RowSummary:
        self.calls.append("write")
        return summarize_rows(rows.read())

    def pre_commit(self, summary: RowSummary) -> None:
        self.calls.append("pre_commit")

    def commit(self) -> None:
        self.calls.append("commit")

    def abort(self) -> None:
        self.calls.append("abort")

    def close(self) -> None:
        self.calls.append("close")


class _OneResource(Resource[OnePassRows]):
    def __init__(self, participant: _RecordingParticipant) -> None:
        self.participant = participant

    def open(self, plan: EpochPlan, partition: int) -> Participant[OnePassRows]:
        return self.participant

    def fingerprint(self) -> str:
        return "fp"


ROWS = ("a", "b", "c")


@pytest.mark.parametrize(
    ("marker", "calls", "outcome"),
    [
        (
            None,
            ["committed_marker", "begin", "write", "pre_commit", "commit", "close"],
            PartitionOutcome.COMMITTED,
        ),
        (
            Marker(4, 9, "x"),
            ["committed_marker", "begin", "write", "pre_commit", "commit", "close"],
            PartitionOutcome.COMMITTED,
        ),
        (
            Marker(5, 3, summarize_rows(ROWS).checksum),
            ["committed_marker", "summarize", "close"],
            PartitionOutcome.ALREADY_COMMITTED,
        ),
        (Marker(6, 1, "y"), ["committed_marker", "close"], PartitionOutcome.ALREADY_COMMITTED),
    ],
    ids=["no-marker", "older-marker", "same-epoch-marker", "later-marker"],
)
def test_participant_contract_reads_rows_at_most_once(
    marker: Marker | None, calls: list[str], outcome: PartitionOutcome
) -> None:
    participant = _RecordingParticipant(marker)
    report = run_partition(
        _OneResource(participant),
        EpochPlan(sink_id=SINK, epoch=5, parallelism=1, fingerprint="fp"),
        0,
        OnePassRows(ROWS),
    )
    assert participant.calls == calls
    assert report.outcome is outcome


def test_replay_with_other_rows_is_refused_without_writing() -> None:
    participant = _RecordingParticipant(Marker(5, 3, "not-the-same"))
    with pytest.raises(
        TxnError,
        match="replayed batch differs",
        check=lambda e: e.code is TxnCode.NON_DETERMINISTIC_REPLAY,
    ):
        run_partition(
            _OneResource(participant),
            EpochPlan(sink_id=SINK, epoch=5, parallelism=1, fingerprint="fp"),
            0,
            OnePassRows(ROWS),
        )
    assert "write" not in participant.calls and "begin" not in participant.calls


def test_mixed_epoch_without_every_task_side_commit_logs_no_decision(tmp_path: Path) -> None:
    # Reports that come back without an exception but with a commit-in-task partition not
    # committed (defence in depth: a write stage that swallowed a failure) must not lead
    # the coordinator to commit the prepared side.
    world = MemoryWorld(tmp_path=tmp_path, kind=MIXED)
    coordinator = world.start()
    executor = world.executor()

    def execute(plan: EpochPlan) -> Sequence[PartitionReport]:
        reports = list(executor(plan))
        reports[1] = PartitionReport(
            epoch=plan.epoch, partition=1, outcome=PartitionOutcome.ABORTED, error="lost"
        )
        return reports

    with pytest.raises(
        TxnError,
        match="prepared partitions were rolled back",
        check=lambda e: e.code is TxnCode.EPOCH_ABORTED,
    ):
        coordinator.run_epoch(0, world.parallelism, execute)
    assert world.pg_store.commits == [] and world.pg_store.dangling() == []
    assert world.log is not None and world.log.load().decision(0) is None
