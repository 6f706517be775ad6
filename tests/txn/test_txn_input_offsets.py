"""Input offsets in the plan: logged before the tasks, committed with the epoch, settled.

docs/architecture.md, section 11. The plan record carries the epoch's input offsets; a
record without them is byte-for-byte the earlier format; a retry keeps them and a replay
reading other offsets is refused; ``settle_in_doubt`` settles an epoch in doubt from its
markers for a new query that will never replay it.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from txn import (
    Coordinator,
    CoordinatorStep,
    EpochCompletion,
    EpochHistory,
    EpochPlan,
    EpochState,
    FileEpochLog,
    InputOffsets,
    QueryBinding,
    TaskStep,
    TxnCode,
    TxnError,
)
from txn._codec import decode_record, encode_record, seal, unseal
from txn._settle import settle_in_doubt
from txn.testing import KAFKA_LIKE, MIXED, PG_LIKE, Crash, MemoryWorld
from txn.testing._memworld import SINK

OFFSETS = InputOffsets.of({("in", 0): 10, ("in", 1): 4}, {("in", 0): 15, ("in", 1): 4})


def test_input_offsets_pickle_and_json() -> None:
    assert pickle.loads(pickle.dumps(OFFSETS)) == OFFSETS
    plan = EpochPlan(sink_id=SINK, epoch=3, parallelism=2, fingerprint="fp", input=OFFSETS)
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert OFFSETS.end_json() == '{"in":{"0":15,"1":4}}'
    assert InputOffsets.from_body(json.loads(json.dumps(OFFSETS.to_body()))) == OFFSETS
    assert OFFSETS.kafka_only
    assert not InputOffsets.of({}, {("in", 0): 1}, other_sources=1).kafka_only
    assert not InputOffsets().kafka_only  # no Kafka source at all


def test_plan_with_input_round_trips_and_without_is_the_old_format() -> None:
    plan = EpochPlan(sink_id=SINK, epoch=3, parallelism=2, fingerprint="fp", input=OFFSETS)
    assert decode_record(encode_record(plan)) == plan
    bare = EpochPlan(sink_id=SINK, epoch=3, parallelism=2, fingerprint="fp")
    body = unseal(encode_record(bare), source="t")
    assert "input" not in body  # the earlier releases' record, byte for byte
    assert decode_record(encode_record(bare)) == bare


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"start": {}, "end": {}}, "fields"),
        ({"start": {}, "end": {"in": {"0": -1}}, "other_sources": 0}, "want an int >= 0"),
        ({"start": {}, "end": {"in": {"x": 1}}, "other_sources": 0}, "not a non-negative"),
        ({"start": {}, "end": ["in"], "other_sources": 0}, "object of topics"),
        ({"start": {}, "end": {}, "other_sources": True}, "want int"),
        ([], "want dict"),
    ],
)
def test_bad_input_is_a_corrupt_record(value: object, match: str) -> None:
    body = unseal(
        encode_record(
            EpochPlan(sink_id=SINK, epoch=1, parallelism=1, fingerprint="fp", input=OFFSETS)
        ),
        source="t",
    )
    body["input"] = value
    with pytest.raises(TxnError, match=match, check=lambda e: e.code is TxnCode.EPOCH_LOG_CORRUPT):
        decode_record(seal(body))


def test_the_file_log_keeps_the_last_committed_input_through_compaction(tmp_path: Path) -> None:
    log = FileEpochLog(tmp_path / "l.log", sink_id=SINK, retain_epochs=1)
    try:
        for epoch in range(5):
            offsets = InputOffsets.of({("in", 0): epoch}, {("in", 0): epoch + 1})
            log.append(
                EpochPlan(sink_id=SINK, epoch=epoch, parallelism=1, fingerprint="fp", input=offsets)
            )
            log.append(EpochCompletion(SINK, epoch, committed=True))
    finally:
        log.close()
    reopened = FileEpochLog(tmp_path / "l.log", sink_id=SINK)
    try:
        history = reopened.load()
    finally:
        reopened.close()
    last = history.last_committed_plan()
    assert last is not None and last.epoch == 4
    assert last.input == InputOffsets.of({("in", 0): 4}, {("in", 0): 5})
    assert history.plan(0) is None  # compacted


def test_a_retry_must_keep_its_plans_input() -> None:
    planned = EpochPlan(sink_id=SINK, epoch=0, parallelism=2, fingerprint="fp", input=OFFSETS)
    history = EpochHistory.from_records([planned], sink_id=SINK)
    other = InputOffsets.of({("in", 0): 10}, {("in", 0): 16})
    with pytest.raises(
        TxnError, match="input", check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION
    ):
        history.with_record(
            EpochPlan(
                sink_id=SINK, epoch=0, parallelism=2, fingerprint="fp", attempt=1, input=other
            )
        )
    history.with_record(
        EpochPlan(sink_id=SINK, epoch=0, parallelism=2, fingerprint="fp", attempt=1, input=OFFSETS)
    )


def test_coordinator_plans_with_the_input_and_refuses_another_replay(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    coordinator = world.start()
    result = coordinator.run_epoch(0, world.parallelism, world.executor(), input_offsets=OFFSETS)
    assert result.plan is not None and result.plan.input == OFFSETS
    assert world.history().last_committed_plan() == result.plan
    world.crashes = [Crash(where="task", step=TaskStep.DECIDED, partition=1)]
    later = InputOffsets.of({("in", 0): 15}, {("in", 0): 20})
    with pytest.raises(BaseException, match="crash at"):
        coordinator.run_epoch(1, world.parallelism, world.executor(), input_offsets=later)
    world.crash()
    coordinator = world.start()
    other = InputOffsets.of({("in", 0): 15}, {("in", 0): 21})
    with pytest.raises(
        TxnError,
        match="not the batch that was planned",
        check=lambda e: e.code is TxnCode.PLAN_MISMATCH,
    ):
        coordinator.run_epoch(1, world.parallelism, world.executor(), input_offsets=other)
    done = coordinator.run_epoch(1, world.parallelism, world.executor(), input_offsets=later)
    assert done.committed and done.plan is not None and done.plan.input == later
    world.check_exactly_once(2)


def _in_doubt(world: MemoryWorld, crash: Crash) -> Coordinator[object]:
    """Commit epoch 0, crash inside epoch 1, restart and recover; return the coordinator."""
    world.run_epoch(0)
    world.crashes = [crash]
    assert world.coordinator is not None
    with pytest.raises(BaseException, match="crash at"):
        world.coordinator.run_epoch(1, world.parallelism, world.executor())
    world.crash()
    coordinator = world.start()
    coordinator.recover()
    return coordinator


def _settle(world: MemoryWorld) -> object:
    log = world.open_log()
    try:
        return settle_in_doubt(log, world.new_resource())
    finally:
        log.close()


def test_settle_commits_an_epoch_whose_markers_show_it(tmp_path: Path) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=KAFKA_LIKE)
    _in_doubt(world, Crash(where="coordinator", step=CoordinatorStep.REPORTS_RECEIVED))
    world.crash()  # the settling process opens the log itself
    settled = _settle(world)
    assert settled == type(settled)(committed=(1,), aborted=())
    assert world.history().state(1) is EpochState.COMMITTED
    world.check_exactly_once(2)


@pytest.mark.parametrize("kind", [KAFKA_LIKE, MIXED, PG_LIKE])
def test_settle_aborts_an_epoch_nothing_of_which_is_visible(tmp_path: Path, kind: str) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind)
    _in_doubt(world, Crash(where="coordinator", step=CoordinatorStep.PLAN_LOGGED))
    world.crash()
    settled = _settle(world)
    history = world.history()
    assert history.state(1) is EpochState.ABORTED
    if kind != PG_LIKE:  # PostgreSQL-like: recover() already rolled it back
        assert settled == type(settled)(committed=(), aborted=(1,))
    # a new query takes the aborted epoch over: its batch 0 is epoch 1
    history.with_record(QueryBinding(SINK, "q-new", 1))
    with pytest.raises(
        TxnError,
        match="takes over the aborted epoch 1",
        check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
    ):
        history.with_record(QueryBinding(SINK, "q-new", 2))


@pytest.mark.parametrize("kind", [KAFKA_LIKE, MIXED])
def test_settle_refuses_a_partly_committed_epoch(tmp_path: Path, kind: str) -> None:
    world = MemoryWorld(tmp_path=tmp_path, kind=kind)
    _in_doubt(world, Crash(where="task", step=TaskStep.DECIDED, partition=1))
    world.crash()
    with pytest.raises(
        TxnError,
        match=r"committed on write partitions \[0",
        check=lambda e: e.code is TxnCode.EPOCH_UNRESOLVED,
    ):
        _settle(world)
    assert world.history().state(1) is EpochState.PLANNED  # nothing logged
