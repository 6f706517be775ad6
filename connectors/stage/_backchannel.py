"""The back channel: a connector's own values between its driver side and its write tasks.

Some connectors keep state across epochs on both sides of the stage (the Kafka sink's
pooled strategy: the driver decides which client a worker kept may serve, from what the
tasks reported). The stage carries such values without looking into them:

* driver to tasks: before each run of the write stage, the stage asks each member
  connector's :class:`BackChannel` for a *ticket* (:meth:`BackChannel.ticket`) and ships it
  in the task spec; the task's resource finds its member's ticket in ``TaskInfo.ticket``
  (``_task``);
* tasks to driver: the resource sends *notes* (``TaskInfo.send``); they travel back in the
  task's stats and, after a run that succeeded, reach the member's channel together with
  the run's reports of the member's partitions (:meth:`BackChannel.observe`);
* protocol events: the stage calls :meth:`BackChannel.on_event` at each
  :class:`StageEvent`. The plan attempt, the stage run and the task attempt travel as
  data: :class:`StageRun` with the ticket, the task attempt in ``TaskInfo``.

Tickets and notes are the connector's types: frozen dataclasses, picklable (checked when
the stage takes them, :func:`require_frozen`). The epoch metrics count client set-ups
through ``TaskInfo.count_new_client``, a field of the stage's own, never from notes.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from txn import CommitMode, EpochPlan, Guarantee, PartitionReport

TicketT = TypeVar("TicketT")
NoteT = TypeVar("NoteT")


class StageEvent(enum.Enum):
    """A protocol event after which clients a connector kept may have been fenced.

    * ``RECOVERY``: ``Coordinator.recover()`` runs (``abort_lingering`` on every partition);
    * ``FAILED_EPOCH``: a ``foreachBatch`` call failed (its retries may have opened clients);
    * ``STAGE_RERUN``: the sink re-runs a failed write stage (its tasks open anew);
    * ``TASK_RETRY``: Spark retried a write task (the retry opened anew);
    * ``PARALLELISM_CHANGE``: the plan's parallelism differs from the last run's (a shrink
      aborts the lingering work of the dropped partitions).
    """

    RECOVERY = "recovery"
    FAILED_EPOCH = "failed-epoch"
    STAGE_RERUN = "stage-rerun"
    TASK_RETRY = "task-retry"
    PARALLELISM_CHANGE = "parallelism-change"


@dataclass(frozen=True, kw_only=True)
class StageRun:
    """One run of the write stage of ``plan``: run ``stage_run`` (0, then each re-run)."""

    plan: EpochPlan
    stage_run: int = 0

    @property
    def plan_attempt(self) -> int:
        """The plan's attempt: 0, or an in-doubt epoch's redo."""
        return self.plan.attempt

    @property
    def gated(self) -> bool:
        """Whether the epoch's commits wait for a vote round (exactly-once, aligned)."""
        plan = self.plan
        return plan.guarantee is Guarantee.EXACTLY_ONCE and plan.mode is CommitMode.ALIGNED


class BackChannel(abc.ABC, Generic[TicketT, NoteT]):
    """The driver side of a connector's back channel (one per sink object; the module doc).

    Called on the driver, on the thread that runs the epoch, one call at a time.
    """

    @abc.abstractmethod
    def on_event(self, event: StageEvent) -> None:
        """Note a protocol event (before the next ticket)."""

    @abc.abstractmethod
    def ticket(self, run: StageRun) -> TicketT:
        """Return the ticket the tasks of ``run`` receive (a frozen, picklable dataclass)."""

    @abc.abstractmethod
    def observe(
        self, run: StageRun, reports: Sequence[PartitionReport], notes: Sequence[NoteT]
    ) -> None:
        """Learn from ``run``, which succeeded: its reports of this member, the tasks' notes."""


def require_frozen(value: object, what: str) -> None:
    """Raise ``TypeError`` unless ``value`` is an instance of a frozen dataclass."""
    params = getattr(value, "__dataclass_params__", None)
    if (
        isinstance(value, type)
        or not dataclasses.is_dataclass(value)
        or params is None
        or not params.frozen
    ):
        msg = f"{what} must be a frozen dataclass instance (picklable), got {value!r}"
        raise TypeError(msg)


class BackChannels:
    """The back channels of a sink's members, in member order (None: a member has none).

    The stage's one object for them: it announces a change of parallelism itself, hands
    out the members' tickets of a run and gives each member its notes and reports.
    """

    def __init__(self, channels: Sequence[BackChannel[Any, Any] | None]) -> None:
        self._channels = tuple(channels)
        self._parallelism: int | None = None

    def event(self, event: StageEvent) -> None:
        """Tell every member's channel of ``event``."""
        for channel in self._channels:
            if channel is not None:
                channel.on_event(event)

    def tickets(self, run: StageRun) -> tuple[Any, ...]:
        """Return each member's ticket of ``run`` (None without a channel).

        A parallelism other than the last run's is announced first
        (``StageEvent.PARALLELISM_CHANGE``).
        """
        parallelism = run.plan.parallelism
        if parallelism != self._parallelism:
            if self._parallelism is not None:
                self.event(StageEvent.PARALLELISM_CHANGE)
            self._parallelism = parallelism
        tickets = tuple(None if c is None else c.ticket(run) for c in self._channels)
        for ticket in tickets:
            if ticket is not None:
                require_frozen(ticket, "a back-channel ticket")
        return tickets

    def observe(
        self,
        run: StageRun,
        reports: Sequence[PartitionReport],
        notes: Sequence[tuple[int, Any]],
        shares: Sequence[tuple[int, int]],
    ) -> None:
        """Hand each member its notes and the reports of its ``shares[m]`` (offset, width)."""
        for member, channel in enumerate(self._channels):
            if channel is None:
                continue
            offset, width = shares[member]
            mine = [r for r in reports if offset <= r.partition < offset + width]
            channel.observe(run, mine, [note for m, note in notes if m == member])
