"""Unit tests of the stage's back channel (connectors/stage/_backchannel.py) and its task side."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from connectors.stage import BackChannel, StageEvent, TaskInfo
from connectors.stage._backchannel import BackChannels, StageRun, require_frozen
from connectors.stage._metrics import EpochRecorder, TaskStats
from connectors.stage._task import bind
from txn import CommitMode, CompositeResource, EpochPlan, EpochResult, Guarantee, PartitionReport
from txn._composite import Member
from txn._model import PartitionOutcome
from txn.testing import CommitInTaskResource, MemoryStore


@dataclass(frozen=True)
class Ticket:
    serial: int


@dataclass(frozen=True)
class Note:
    partition: int
    text: str


@dataclass
class Recording(BackChannel[Ticket, Note]):
    """A connector's driver side that records every call."""

    events: list[StageEvent] = field(default_factory=list)
    runs: list[StageRun] = field(default_factory=list)
    seen: list[tuple[list[int], list[Note]]] = field(default_factory=list)

    def on_event(self, event: StageEvent) -> None:
        self.events.append(event)

    def ticket(self, run: StageRun) -> Ticket:
        self.runs.append(run)
        return Ticket(len(self.runs))

    def observe(
        self, run: StageRun, reports: Sequence[PartitionReport], notes: Sequence[Note]
    ) -> None:
        self.seen.append(([r.partition for r in reports], list(notes)))


def plan(parallelism: int = 2, mode: CommitMode = CommitMode.ALIGNED, attempt: int = 0):
    return EpochPlan(
        sink_id="s",
        epoch=1,
        parallelism=parallelism,
        fingerprint="f",
        guarantee=Guarantee.EXACTLY_ONCE,
        mode=mode,
        attempt=attempt,
    )


def report(partition: int) -> PartitionReport:
    return PartitionReport(
        epoch=1, partition=partition, outcome=PartitionOutcome.COMMITTED, rows=1, checksum="u1"
    )


def test_a_stage_run_carries_the_plan_attempt_the_run_and_whether_commits_are_gated():
    run = StageRun(plan=plan(attempt=2), stage_run=1)
    assert (run.plan_attempt, run.stage_run, run.gated) == (2, 1, True)
    assert not StageRun(plan=plan(mode=CommitMode.UNALIGNED)).gated
    at_least_once = EpochPlan(
        sink_id="s",
        epoch=1,
        parallelism=2,
        fingerprint="f",
        guarantee=Guarantee.AT_LEAST_ONCE,
        mode=CommitMode.ALIGNED,
    )
    assert not StageRun(plan=at_least_once).gated
    assert pickle.loads(pickle.dumps(run)) == run


def test_events_reach_every_members_channel_and_a_parallelism_change_is_announced():
    first, second = Recording(), Recording()
    channels = BackChannels([first, None, second])
    assert channels.tickets(StageRun(plan=plan(2))) == (Ticket(1), None, Ticket(1))
    channels.tickets(StageRun(plan=plan(2), stage_run=1))
    assert first.events == []  # the first parallelism is no change
    channels.event(StageEvent.STAGE_RERUN)
    channels.tickets(StageRun(plan=plan(3)))
    want = [StageEvent.STAGE_RERUN, StageEvent.PARALLELISM_CHANGE]
    assert first.events == second.events == want
    assert [r.plan.parallelism for r in first.runs] == [2, 2, 3]


def test_each_member_gets_its_own_notes_and_the_reports_of_its_partitions():
    kafka, table = Recording(), Recording()
    channels = BackChannels([kafka, table])
    run = StageRun(plan=plan(5))
    channels.tickets(run)
    notes = [(0, Note(0, "a")), (1, Note(3, "b")), (0, Note(1, "c"))]
    channels.observe(run, [report(p) for p in range(5)], notes, [(0, 2), (2, 3)])
    assert kafka.seen == [([0, 1], [Note(0, "a"), Note(1, "c")])]
    assert table.seen == [([2, 3, 4], [Note(3, "b")])]


class Bound(CommitInTaskResource):
    """A resource that keeps the task it was bound to."""

    task: Any = None

    def for_task(self, task: TaskInfo[Any]) -> Bound:
        bound = Bound(self.store)
        bound.task = task
        return bound


def test_bind_hands_each_member_its_ticket_and_one_outbox():
    store = MemoryStore()
    composite = CompositeResource([Member(Bound(store), 1), Member(Bound(store), 2)])
    info: TaskInfo[Any] = TaskInfo(partition=2, task_attempt=1)
    bound = bind(composite, info, (Ticket(7), None))
    assert isinstance(bound, CompositeResource)
    tasks = [m.resource.task for m in bound.members]  # type: ignore[attr-defined]
    assert [(t.ticket, t.member, t.partition, t.task_attempt) for t in tasks] == [
        (Ticket(7), 0, 2, 1),
        (None, 1, 2, 1),
    ]
    tasks[1].send(Note(2, "x"))
    tasks[0].count_new_client()
    assert info.outbox.notes == [(1, Note(2, "x"))] and info.outbox.new_clients == 1
    single = bind(Bound(store), info)
    assert single.task.ticket is None  # type: ignore[attr-defined]
    plain = CommitInTaskResource(store)
    assert bind(plain, info) is plain  # not TaskBound: as it is


@pytest.mark.parametrize("value", [{"a": 1}, Recording(), Ticket, "text"])
def test_tickets_and_notes_must_be_frozen_dataclasses(value):
    with pytest.raises(TypeError, match="frozen dataclass"):
        require_frozen(value, "a note")
    with pytest.raises(TypeError, match="frozen dataclass"):
        TaskInfo(partition=0, task_attempt=0).send(value)

    class Loose(Recording):
        def ticket(self, run: StageRun) -> Any:
            return value

    with pytest.raises(TypeError, match="back-channel ticket"):
        BackChannels([Loose()]).tickets(StageRun(plan=plan()))


def test_client_set_ups_are_counted_from_the_stats_not_from_notes():
    recorder = EpochRecorder(sink_id="s", batch_id=1, query_id=None)
    stats = [
        TaskStats(partition=0, clients_new=1, notes=((0, Note(0, "new")),)),
        TaskStats(partition=1, clients_new=0, notes=((0, Note(1, "kept")),)),
    ]
    recorder.stage_ran(0.1, stats, failed=False)
    result = EpochResult(
        epoch=1, plan=plan(), skipped=False, committed=True, reports=(report(0), report(1))
    )
    assert recorder.finish(result, 1).clients_new == 1
