"""The write task: what it receives, what it runs, what it sends back.

One Spark task per write partition runs :func:`write_task` over its rows (``mapInArrow``,
``barrier=True`` in aligned mode). It binds the connector's resource to the task
(:class:`TaskInfo`), gathers aligned votes through the channel of the spec, runs
:func:`txn._task.run_partition`, and returns one row: a pickled :class:`TaskResult`.
Errors a re-run cannot fix (``retry_stage`` False, e.g. bad input) travel back inside the
result, typed, instead of failing the task (Spark would retry it in vain).
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, runtime_checkable

import pyarrow as pa

from connectors._worker_heap import freeze_worker_heap
from connectors.stage import _hooks
from connectors.stage._backchannel import require_frozen
from connectors.stage._errors import VOTE_CODES, StageCode, StageError
from connectors.stage._metrics import TaskStats
from connectors.stage._rows import ArrowPartition
from connectors.stage._votes import (
    VoteTicket,
    claim_partition,
    gather_votes,
    vote_from_doc,
    vote_to_doc,
)
from txn import (
    CompositeResource,
    EpochPlan,
    Guarantee,
    PartitionReport,
    Resource,
    TaskStep,
    Vote,
    can_retry_stage,
)
from txn._composite import Member
from txn._model import PartitionOutcome
from txn._task import run_partition

if TYPE_CHECKING:
    from pyspark import BarrierTaskContext, TaskContext

log = logging.getLogger("connectors.stage.task")

RESULT_SCHEMA = "payload binary"


TicketT = TypeVar("TicketT")


@dataclass
class TaskOutbox:
    """What a write task sends back besides its report (filled through :class:`TaskInfo`).

    ``notes``: (member, note) of the back channel (``_backchannel``); ``new_clients``: the
    clients the task set up anew (counted in the epoch metrics as ``clients_new``).
    """

    notes: list[tuple[int, Any]] = field(default_factory=list)
    new_clients: int = 0


@dataclass(frozen=True, kw_only=True)
class TaskInfo(Generic[TicketT]):
    """Where a write task runs: handed to a connector's resource in the task (:class:`TaskBound`).

    ``ticket``: the member connector's back-channel ticket of this stage run (None when
    the connector has no back channel); ``member``: the connector's place in a composite
    sink (0 for a single one). What the resource sends goes into ``outbox``, shared by the
    members of one task.
    """

    partition: int
    task_attempt: int
    ticket: TicketT | None = None
    member: int = 0
    outbox: TaskOutbox = field(default_factory=TaskOutbox, compare=False, repr=False)

    def send(self, note: object) -> None:
        """Send ``note`` (a frozen dataclass of the connector's) to its driver-side channel."""
        require_frozen(note, "a back-channel note")
        self.outbox.notes.append((self.member, note))

    def count_new_client(self) -> None:
        """Count a client set up anew for this task (not one kept from an earlier task)."""
        self.outbox.new_clients += 1


@runtime_checkable
class TaskBound(Protocol):
    """A resource that wants to know its task (its back-channel ticket, its notes)."""

    def for_task(self, task: TaskInfo[Any]) -> Resource[ArrowPartition]:
        """Return the resource to use in the task ``task``."""


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """Everything a write task needs; picklable (plain config, no clients).

    ``tickets``: each member connector's back-channel ticket of this stage run
    (``_backchannel``; None for a member without one).
    ``votes``: the driver vote channel's ticket (aligned mode, ``vote_channel="driver"``);
    None gathers with ``allGather`` (aligned) or not at all (unaligned). ``claims``: the
    driver's at-most-once claims (None: only a task's first attempt may write).
    ``offset`` / ``partitions``: this stage's share of the plan's partitions (one member
    of a composite sink: its task ``i`` is the plan's partition ``offset + i``); by
    default the whole plan. ``empty_input``: the stage's input had no partition at all
    (Spark optimized an empty batch away), so the tasks run over placeholder partitions
    and write no rows: each still opens, pre-commits and votes (docs/architecture.md,
    "Empty epochs"). ``batch_id``: the micro-batch (recorded with dead-lettered records).
    """

    resource: Resource[ArrowPartition]
    plan: EpochPlan
    aligned: bool
    tickets: tuple[Any, ...] = ()
    ordered: bool = False
    votes: VoteTicket | None = None
    hooks: _hooks.StepHooks | None = None
    claims: VoteTicket | None = None
    offset: int = 0
    partitions: int | None = None
    empty_input: bool = False
    batch_id: int | None = None

    @property
    def task_count(self) -> int:
        """Tasks of this stage: its share of the plan's partitions."""
        return self.plan.parallelism if self.partitions is None else self.partitions


@dataclass(frozen=True, kw_only=True)
class TaskResult:
    """What one write task sends back: its report, or an error a re-run cannot fix."""

    partition: int
    report: PartitionReport | None = None
    error: bytes | None = None
    task_attempt: int = 0
    stats: TaskStats | None = None


def _barrier_gather(ctx: BarrierTaskContext) -> Callable[[Vote], list[Vote]]:
    """Gather through Spark's ``BarrierTaskContext.allGather`` (``vote_channel="barrier"``)."""

    def gather(vote: Vote) -> list[Vote]:
        answers = ctx.allGather(json.dumps(vote_to_doc(vote)))
        return [vote_from_doc(json.loads(m)) for m in answers]

    return gather


def _driver_gather(
    ticket: VoteTicket, ctx: BarrierTaskContext, expected: int
) -> Callable[[Vote], list[Vote]]:
    """Gather through the driver's vote server (``vote_channel="driver"``)."""

    def gather(vote: Vote) -> list[Vote]:
        tasks = len(ctx.getTaskInfos())  # local: Spark hands every task the stage's size
        if tasks != expected:
            msg = (
                f"epoch {ticket.epoch}: the barrier stage has {tasks} tasks but the plan gives "
                f"it {expected} write partitions; Spark changed the partitioning "
                "(disable spark.sql.adaptive coalescing for this query)"
            )
            raise StageError(msg, code=StageCode.VOTE_CHANNEL)
        return gather_votes(ticket, vote)

    return gather


def _gatherer(spec: TaskSpec, ctx: TaskContext) -> Callable[[Vote], list[Vote]] | None:
    """Return the task's vote gathering function (None: unaligned, decide alone)."""
    if not spec.aligned:
        return None
    barrier = cast("BarrierTaskContext", ctx)  # aligned tasks run in a barrier stage
    if spec.votes is None:
        return _barrier_gather(barrier)
    return _driver_gather(spec.votes, barrier, spec.task_count)


class _Clock:
    """Timestamps of a task's protocol steps; fires the fault hooks on the way."""

    def __init__(self, hooks: _hooks.StepHooks | None) -> None:
        self.hooks = hooks
        self.started = time.monotonic()
        self.at: dict[TaskStep, float] = {}

    def __call__(self, step: TaskStep, plan: EpochPlan, partition: int) -> None:
        self.at[step] = time.monotonic()
        if self.hooks is not None:
            self.hooks.fire(step, plan.epoch, partition)

    def ms(self, start: TaskStep | None, end: TaskStep) -> float:
        """Milliseconds from ``start`` (None: the task's start) to ``end`` (0 if not reached)."""
        first = self.started if start is None else self.at.get(start)
        last = self.at.get(end)
        return 0.0 if first is None or last is None else round((last - first) * 1000.0, 3)


def _may_write(spec: TaskSpec, ctx: TaskContext, partition: int, task_attempt: int) -> bool:
    """At-most-once: only the attempt that owns the partition writes (others would repeat)."""
    if spec.plan.guarantee is not Guarantee.AT_MOST_ONCE:
        return True
    if spec.claims is None:
        return task_attempt == 0
    try:
        return claim_partition(spec.claims, partition, int(ctx.taskAttemptId()))
    except StageError as exc:  # cannot prove ownership: writing could duplicate
        if exc.code not in VOTE_CODES:
            raise
        log.error(
            "epoch %d partition %d not written (at-most-once claim failed: %s)",
            spec.plan.epoch,
            partition,
            exc,
        )
        return False


def bind(
    resource: Resource[Any], task: TaskInfo[Any], tickets: Sequence[Any] = ()
) -> Resource[Any]:
    """Bind ``resource`` (or each member of a composite) to the write task ``task``.

    Member ``m`` gets ``tickets[m]`` (None if missing) in its :class:`TaskInfo`.
    """
    if isinstance(resource, CompositeResource):
        return CompositeResource(
            [
                Member(_bind_one(m.resource, task, i, tickets), m.parallelism)
                for i, m in enumerate(resource.members)
            ]
        )
    return _bind_one(resource, task, 0, tickets)


def _bind_one(
    resource: Resource[Any], task: TaskInfo[Any], member: int, tickets: Sequence[Any]
) -> Resource[Any]:
    if not isinstance(resource, TaskBound):
        return resource
    ticket = tickets[member] if member < len(tickets) else None
    return resource.for_task(replace(task, ticket=ticket, member=member))


def _mid_write(spec: TaskSpec, partition: int) -> tuple[int, Callable[[], None]] | None:
    """Return the task's ``mid_write`` fault (rows, callback) of the hooks, if any.

    The stage fires it from the rows' iterator (:class:`ArrowPartition`), so every
    participant gets mid-write faults without seeing the hooks.
    """
    if spec.hooks is None:
        return None
    return spec.hooks.interrupt_write(spec.plan.epoch, partition)


def write_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Body of one write task (runs in a Spark Python worker)."""
    from pyspark import BarrierTaskContext, TaskContext

    freeze_worker_heap()

    # Spark sets the task's context in every task (get() is None only outside one).
    ctx = cast("TaskContext", BarrierTaskContext.get() if spec.aligned else TaskContext.get())
    partition = spec.offset + int(ctx.partitionId())
    task_attempt = int(ctx.attemptNumber())
    clock = _Clock(spec.hooks)
    if not _may_write(spec, ctx, partition, task_attempt):
        report = PartitionReport(
            epoch=spec.plan.epoch,
            partition=partition,
            outcome=PartitionOutcome.ABORTED,
            error="at-most-once: an earlier attempt owned this partition; not written again",
        )
        stats = TaskStats(partition=partition, task_attempt=task_attempt, claimed=False)
        result = TaskResult(
            partition=partition, report=report, task_attempt=task_attempt, stats=stats
        )
        yield pa.RecordBatch.from_pydict({"payload": [pickle.dumps(result)]})
        return
    info: TaskInfo[Any] = TaskInfo(partition=partition, task_attempt=task_attempt)
    resource = bind(spec.resource, info, spec.tickets)
    if spec.empty_input:
        for _ in batches:  # the placeholder rows of an empty input: read, never written
            pass
        batches = iter(())
    rows = ArrowPartition(
        batches,
        ordered=spec.ordered,
        interrupt=_mid_write(spec, partition),
        batch_id=spec.batch_id,
    )
    try:
        report = run_partition(
            resource,
            spec.plan,
            partition,
            rows,
            gather=_gatherer(spec, ctx),
            hooks=clock,
        )
        result = TaskResult(partition=partition, report=report, task_attempt=task_attempt)
    except Exception as exc:
        if can_retry_stage(exc):
            raise
        result = TaskResult(partition=partition, error=pickle.dumps(exc), task_attempt=task_attempt)
    stats = TaskStats(
        partition=partition,
        task_attempt=task_attempt,
        rows=result.report.rows if result.report else 0,
        bytes=rows.nbytes,
        pre_commit_ms=clock.ms(None, TaskStep.PRE_COMMITTED),
        vote_ms=clock.ms(TaskStep.PRE_COMMITTED, TaskStep.DECIDED) if spec.aligned else 0.0,
        commit_ms=clock.ms(TaskStep.DECIDED, TaskStep.COMMITTED),
        dead_lettered=rows.dead_lettered if result.report else 0,
        skipped_records=rows.skipped if result.report else 0,
        notes=tuple(info.outbox.notes),
        clients_new=info.outbox.new_clients,
    )
    result = replace(result, stats=stats)
    yield pa.RecordBatch.from_pydict({"payload": [pickle.dumps(result)]})
