"""The write task: what it receives, what it runs, what it sends back.

One Spark task per write partition runs :func:`write_task` over its rows (``mapInArrow``,
``barrier=True`` in aligned mode). It binds the connector's resource to the task
(:class:`TaskInfo`), gathers aligned votes through the channel of the spec, runs
:func:`txn.run_partition`, and returns one row: a pickled :class:`TaskResult`.
Errors a re-run cannot fix (``retry_stage`` False, e.g. bad input) travel back inside the
result, typed, instead of failing the task (Spark would retry it in vain).
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import pyarrow as pa

from connectors.stage import _hooks
from connectors.stage._errors import VoteChannelError
from connectors.stage._metrics import TaskStats
from connectors.stage._reuse import ClientNote, ReuseTicket
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
    Member,
    PartitionOutcome,
    PartitionReport,
    Resource,
    TaskStep,
    Vote,
    can_retry_stage,
    run_partition,
)

if TYPE_CHECKING:
    from pyspark import BarrierTaskContext, TaskContext

log = logging.getLogger("connectors.stage.task")

RESULT_SCHEMA = "payload binary"


@dataclass(frozen=True)
class TaskInfo:
    """Where a write task runs: handed to a connector's resource in the task.

    ``clients``: the client instances that served the task (:meth:`note_client`); they
    travel back in the task's stats for the driver's reuse policy (``_reuse``).
    """

    partition: int
    task_attempt: int
    reuse: ReuseTicket
    clients: list[ClientNote] = field(default_factory=list, compare=False)

    def note_client(self, lane: int, token: str, *, fenced_all: bool, reused: bool) -> None:
        """Report the client instance that serves this task (lane ``lane``, ``token``)."""
        self.clients.append(ClientNote(self.partition, lane, token, fenced_all, reused))

    def note_prepared(self, partition: int, lane: int, token: str, serial: int) -> None:
        """Report an instance this worker prepared for ``partition`` under ticket ``serial``."""
        self.clients.append(ClientNote(partition, lane, token, False, False, True, serial))

    @property
    def may_reuse(self) -> bool:
        """Whether clients pooled by an earlier epoch may serve this task (see ``_reuse``)."""
        return self.reuse.may_reuse(self.task_attempt)


@runtime_checkable
class TaskBound(Protocol):
    """A resource that wants to know its task (client reuse)."""

    def for_task(self, task: TaskInfo) -> Resource[ArrowPartition]:
        """Return the resource to use in the task ``task``."""


@dataclass(frozen=True)
class TaskSpec:
    """Everything a write task needs; picklable (plain config, no clients).

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
    reuse: ReuseTicket
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


@dataclass(frozen=True)
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
            raise VoteChannelError(msg)
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
    except VoteChannelError as exc:  # cannot prove ownership: writing could duplicate
        log.error(
            "epoch %d partition %d not written (at-most-once claim failed: %s)",
            spec.plan.epoch,
            partition,
            exc,
        )
        return False


def bind(resource: Resource[Any], task: TaskInfo) -> Resource[Any]:
    """Bind ``resource`` (or every member of a composite) to the write task ``task``."""
    if isinstance(resource, CompositeResource):
        return CompositeResource(
            [Member(bind(m.resource, task), m.parallelism) for m in resource.members]
        )
    if isinstance(resource, TaskBound):
        return resource.for_task(task)
    return resource


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

    # Spark sets the task's context in every task (get() is None only outside one).
    ctx = cast("TaskContext", BarrierTaskContext.get() if spec.aligned else TaskContext.get())
    partition = spec.offset + int(ctx.partitionId())
    task_attempt = int(ctx.attemptNumber())
    clock = _Clock(spec.hooks)
    if not _may_write(spec, ctx, partition, task_attempt):
        report = PartitionReport(
            spec.plan.epoch,
            partition,
            PartitionOutcome.ABORTED,
            error="at-most-once: an earlier attempt owned this partition; not written again",
        )
        stats = TaskStats(partition, task_attempt, claimed=False)
        result = TaskResult(partition, report=report, task_attempt=task_attempt, stats=stats)
        yield pa.RecordBatch.from_pydict({"payload": [pickle.dumps(result)]})
        return
    info = TaskInfo(partition, task_attempt, spec.reuse)
    resource = bind(spec.resource, info)
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
        result = TaskResult(partition, report=report, task_attempt=task_attempt)
    except Exception as exc:
        if can_retry_stage(exc):
            raise
        result = TaskResult(partition, error=pickle.dumps(exc), task_attempt=task_attempt)
    stats = TaskStats(
        partition,
        task_attempt,
        rows=result.report.rows if result.report else 0,
        bytes=rows.nbytes,
        pre_commit_ms=clock.ms(None, TaskStep.PRE_COMMITTED),
        vote_ms=clock.ms(TaskStep.PRE_COMMITTED, TaskStep.DECIDED) if spec.aligned else 0.0,
        commit_ms=clock.ms(TaskStep.DECIDED, TaskStep.COMMITTED),
        dead_lettered=rows.dead_lettered if result.report else 0,
        skipped_records=rows.skipped if result.report else 0,
        clients=tuple(info.clients),
    )
    result = TaskResult(partition, result.report, result.error, task_attempt, stats)
    yield pa.RecordBatch.from_pydict({"payload": [pickle.dumps(result)]})
