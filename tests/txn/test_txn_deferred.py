"""Deferred completion: one epoch-log write per epoch (docs/architecture.md, section 2).

The coordinator over a real :class:`FileEpochLog` and the in-memory participants: the
completion of a commit-in-task exactly-once epoch is written with the next plan, flushed
on close, settled by its markers after a crash (never redone), and a partial marker set
there is a typed error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from txn import (
    CommitMode,
    CoordinatorStep,
    EpochCompletion,
    EpochLog,
    EpochPlan,
    EpochState,
    FileEpochLog,
    Guarantee,
    LogRecord,
    QueryBinding,
    TaskStep,
    TxnCode,
    TxnError,
)
from txn._deferred import DeferredCompletionLog
from txn.testing import KAFKA_LIKE, KINDS, MIXED, PG_LIKE, Crash, MemoryWorld


class RecordingLog(FileEpochLog):
    """A real file log that records the records of each durable write (one rewrite each)."""

    writes: list[tuple[str, ...]]

    def append_all(self, records: Sequence[LogRecord]) -> None:
        super().append_all(records)
        self.writes.append(tuple(_name(r) for r in records))


def _name(record: LogRecord) -> str:
    return f"{type(record).__name__}({record.epoch})"


@dataclass
class RecordingWorld(MemoryWorld):
    """A :class:`MemoryWorld` whose log handles share one list of durable writes."""

    writes: list[tuple[str, ...]] = field(default_factory=list, kw_only=True)

    def open_log(self) -> EpochLog:
        log = RecordingLog(self.log_path, sink_id=self.sink_id)
        log.writes = self.writes
        return log


def _durable(world: MemoryWorld) -> FileEpochLog:
    return FileEpochLog(world.log_path, sink_id=world.sink_id, read_only=True)


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
def test_the_completion_is_written_with_the_next_plan_and_flushed_on_close(
    tmp_path: Path, mode: CommitMode
) -> None:
    world = RecordingWorld(tmp_path=tmp_path, kind=KAFKA_LIKE, mode=mode)
    world.run_epochs(3)
    assert world.writes == [
        ("EpochPlan(0)",),
        ("EpochCompletion(0)", "EpochPlan(1)"),
        ("EpochCompletion(1)", "EpochPlan(2)"),
    ]
    # The last completion is held: durable readers see epoch 2 planned, this log committed.
    assert _durable(world).load().state(2) is EpochState.PLANNED
    assert world.log is not None
    assert world.log.pending == EpochCompletion(world.sink_id, 2, committed=True)
    assert world.log.load().is_committed(2)
    world.close()
    assert world.writes[-1] == ("EpochCompletion(2)",)
    durable = _durable(world).load()
    assert [durable.state(e) for e in range(3)] == [EpochState.COMMITTED] * 3
    world.check_exactly_once(3)


def test_an_append_of_another_record_carries_the_held_completion(tmp_path: Path) -> None:
    world = RecordingWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    world.run_epoch(0)
    assert world.log is not None
    world.log.append(QueryBinding(world.sink_id, "q-1", 0))
    assert world.writes[-1] == ("EpochCompletion(0)", "QueryBinding(0)")
    assert world.log.pending is None
    world.log.flush()  # nothing held: nothing written
    assert len(world.writes) == 2
    world.close()


@pytest.mark.parametrize(
    ("kind", "guarantee"),
    [
        (KAFKA_LIKE, Guarantee.AT_LEAST_ONCE),  # no markers to settle it by
        (PG_LIKE, Guarantee.EXACTLY_ONCE),  # 2PC: decision and completion as before
        (MIXED, Guarantee.EXACTLY_ONCE),
    ],
)
def test_other_epochs_log_their_completion_at_once(
    tmp_path: Path, kind: str, guarantee: Guarantee
) -> None:
    world = RecordingWorld(tmp_path=tmp_path, kind=kind, guarantee=guarantee)
    world.run_epochs(2)
    assert world.log is not None
    assert world.log.pending is None
    assert all("EpochPlan" not in w[0] or len(w) == 1 for w in world.writes), world.writes
    assert world.writes[-1] == ("EpochCompletion(1)",)
    assert _durable(world).load().is_committed(1)
    world.close()


def test_a_crash_after_the_call_returned_is_settled_by_the_markers_never_redone(
    tmp_path: Path,
) -> None:
    world = RecordingWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    world.run_epoch(0)
    world.crash()  # after the call for epoch 0 returned: its completion is lost
    assert _durable(world).load().state(0) is EpochState.PLANNED
    commits_before = list(world.store.commits)
    world.run_epochs(2)  # Spark asks for epoch 1 (epoch 0 is in its commit log)
    assert world.writes[-1] == ("EpochCompletion(0)", "EpochPlan(1)")
    new = [c for c in world.store.commits if c not in commits_before]
    assert {c.epoch for c in new} == {1}, "epoch 0 was redone"
    world.close()
    world.check_exactly_once(2)


def test_a_crash_before_the_next_plan_is_durable_loses_only_the_held_completion(
    tmp_path: Path,
) -> None:
    world = RecordingWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    world.run_epoch(0)
    world.crashes = [Crash(where="coordinator", step=CoordinatorStep.BEFORE_PLAN, epoch=1)]
    world.run_epoch(1)
    assert world.restarts == 1
    assert world.writes == [
        ("EpochPlan(0)",),
        ("EpochCompletion(0)", "EpochPlan(1)"),  # after the restart, settled by the markers
    ]
    world.close()
    world.check_exactly_once(2)


@pytest.mark.parametrize(
    ("failing", "committed"),
    [
        (
            Crash(where="task", step=TaskStep.DECIDED, epoch=0, partition=1),
            [0, 2],
        ),  # partly committed
        (Crash(where="task", step=TaskStep.OPENED, epoch=0, times=3), []),  # nothing committed
    ],
    ids=["partial", "none"],
)
def test_a_next_epoch_after_an_epoch_that_did_not_commit_everywhere_is_a_typed_error(
    tmp_path: Path, failing: Crash, committed: list[int]
) -> None:
    """A function around the sink swallowed epoch 0's error and asked for epoch 1."""
    world = RecordingWorld(tmp_path=tmp_path, kind=KAFKA_LIKE, mode=CommitMode.UNALIGNED)
    world.start()
    assert world.coordinator is not None
    world.crashes = [failing]
    with pytest.raises(BaseException, match="crash at|did not commit"):
        world.coordinator.run_epoch(0, world.parallelism, world.executor())
    world.crashes = []
    assert sorted({c.partition for c in world.store.commits if c.epoch == 0}) == committed
    writes = list(world.writes)
    with pytest.raises(
        TxnError,
        match=r"epoch 1.*write partitions \[",
        check=lambda e: e.code is TxnCode.EPOCH_UNRESOLVED,
    ) as info:
        world.coordinator.run_epoch(1, world.parallelism, world.executor())
    assert "epoch 0" in str(info.value)
    assert world.writes == writes, "something of epoch 1 was logged"
    assert not [c for c in world.store.commits if c.epoch == 1], "epoch 1 was written"
    world.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_replay_of_the_same_epoch_after_the_crash_completes_it(tmp_path: Path, kind: str) -> None:
    """The call for epoch 1 did not return (Spark replays it): redo-or-skip as before."""
    world = RecordingWorld(tmp_path=tmp_path, kind=kind)
    world.crashes = [Crash(where="coordinator", step=CoordinatorStep.BEFORE_PLAN, epoch=2)]
    world.run_epochs(3)
    assert world.restarts == 1
    world.close()
    world.check_exactly_once(3)


def test_a_completion_held_survives_a_failed_write_and_is_not_written_twice(
    tmp_path: Path,
) -> None:
    world = RecordingWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    world.run_epoch(0)
    log = world.log
    assert isinstance(log, DeferredCompletionLog)
    plan = EpochPlan(
        sink_id=world.sink_id,
        epoch=0,
        parallelism=3,
        fingerprint="v1",
        guarantee=Guarantee.EXACTLY_ONCE,
        mode=CommitMode.ALIGNED,
    )
    with pytest.raises(
        TxnError, match="epoch 0", check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION
    ):  # planned again: refused
        log.append(plan)
    assert log.pending is not None, "a refused write dropped the held completion"
    assert _durable(world).load().state(0) is EpochState.PLANNED
    log.flush()
    assert log.pending is None
    assert _durable(world).load().is_committed(0)
    world.close()
    assert world.writes.count(("EpochCompletion(0)",)) == 1


def test_a_refused_completion_is_not_held(tmp_path: Path) -> None:
    world = RecordingWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    world.run_epoch(0)
    log = world.log
    assert isinstance(log, DeferredCompletionLog)
    with pytest.raises(
        TxnError, match="epoch 5", check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION
    ):
        log.append_deferred(EpochCompletion(world.sink_id, 5, committed=True))
    assert log.pending == EpochCompletion(world.sink_id, 0, committed=True)
    world.close()


def test_epoch_aborted_error_keeps_nothing_held(tmp_path: Path) -> None:
    world = RecordingWorld(tmp_path=tmp_path, kind=KAFKA_LIKE, mode=CommitMode.UNALIGNED)
    world.start()
    assert world.coordinator is not None and world.log is not None
    world.store.fail_write(0, 1)
    with pytest.raises(
        TxnError, check=lambda e: e.code in (TxnCode.EPOCH_ABORTED, TxnCode.PARTICIPANT)
    ):
        world.coordinator.run_epoch(0, world.parallelism, world.executor())
    assert world.log.pending is None
    world.close()
