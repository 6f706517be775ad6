"""Records, enums and interfaces of the two-phase-commit core.

Everything here that crosses a process boundary (plans, votes, reports, markers) is a
frozen, picklable dataclass: plans travel from the driver to the write tasks, votes
between tasks, reports back to the driver.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from txn._errors import TxnCode, TxnError
from txn._offsets import InputOffsets

Rows = TypeVar("Rows")
_Choice = TypeVar("_Choice", bound=enum.Enum)

# Seconds a write partition waits for every other partition's vote in aligned mode
# (any vote channel); generous because CI machines are busy, and a crashed partition
# breaks the round at once, so this only bounds real hangs.
GATHER_TIMEOUT_S = 120.0


class Guarantee(str, enum.Enum):
    """Delivery guarantee shared by every sink of the kit.

    * ``EXACTLY_ONCE``: every record of an epoch is visible exactly once, atomically.
    * ``AT_LEAST_ONCE``: nothing is lost; a replayed epoch may duplicate records.
    * ``AT_MOST_ONCE``: nothing is duplicated; a failed epoch may be lost.
    """

    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    AT_MOST_ONCE = "at-most-once"

    @classmethod
    def parse(cls, value: str | Guarantee) -> Guarantee:
        """Return the guarantee named by ``value`` or raise :class:`TxnCode.CONFIG`."""
        return _parse_choice(cls, value, "guarantee")


class CommitMode(str, enum.Enum):
    """How the commit of an exactly-once epoch is coordinated across write tasks.

    * ``ALIGNED``: every task pre-commits, all votes are gathered, then every task
      commits only if every vote is yes (Flink's aligned barriers). Needs all tasks
      of the epoch running at once.
    * ``UNALIGNED``: each task commits its own part as soon as it is pre-committed;
      no gang scheduling. The epoch is still exactly-once (redo-or-skip by marker),
      but it can be partly visible while other tasks are still running.
    """

    ALIGNED = "aligned"
    UNALIGNED = "unaligned"

    @classmethod
    def parse(cls, value: str | CommitMode) -> CommitMode:
        """Return the mode named by ``value`` or raise :class:`TxnCode.CONFIG`."""
        return _parse_choice(cls, value, "commit mode")


def _parse_choice(kind: type[_Choice], value: str | _Choice, what: str) -> _Choice:
    """Return the member of ``kind`` named by ``value`` or raise :class:`TxnCode.CONFIG`."""
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in kind)
        msg = f"unknown {what} {value!r}; use one of: {choices}"
        raise TxnError(msg, code=TxnCode.CONFIG) from None


@dataclass(frozen=True, kw_only=True)
class EpochPlan:
    """What the coordinator decided for epoch ``epoch`` before any write task ran.

    Written durably to the epoch log first; an in-doubt epoch is always redone with
    the same plan (same parallelism), so rows land in the same write partitions.
    ``input``: the epoch's input offsets when its query reads Kafka (None otherwise); they
    are committed exactly when the epoch is (docs/architecture.md, section 11).
    """

    sink_id: str
    epoch: int
    parallelism: int
    fingerprint: str
    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    mode: CommitMode = CommitMode.ALIGNED
    attempt: int = 0
    input: InputOffsets | None = None


@dataclass(frozen=True, kw_only=True)
class EpochDecision:
    """The coordinator's commit-or-abort decision, logged before it is delivered."""

    sink_id: str
    epoch: int
    commit: bool
    reason: str = ""


@dataclass(frozen=True)
class EpochCompletion:
    """Epoch ``epoch`` is finished: ``committed`` says whether its effect is applied."""

    sink_id: str
    epoch: int
    committed: bool


@dataclass(frozen=True)
class QueryBinding:
    """The query that writes a sink: its batch ``b`` is epoch ``b + epoch_offset``.

    A sink's epochs are meaningful only for the query (the checkpoint) that planned them:
    a new checkpoint restarts batch ids at 0, and those ids must not meet the old query's
    committed epochs. ``query_id`` "" binds the next query that writes (set by an
    operator's reset before the new query's id is known).
    """

    sink_id: str
    query_id: str
    epoch_offset: int

    @property
    def epoch(self) -> int:
        """The first epoch of the bound query (where the binding sits among the records)."""
        return self.epoch_offset


LogRecord = EpochPlan | EpochDecision | EpochCompletion | QueryBinding


@dataclass(frozen=True)
class Marker:
    """Idempotency marker: the last epoch a write partition committed, with its content.

    Stored atomically with the data (inside the same transaction), so it is the single
    source of truth for redo-or-skip.
    """

    epoch: int
    rows: int
    checksum: str


@dataclass(frozen=True)
class RowSummary:
    """Row count and content checksum of what one partition writes in one epoch."""

    rows: int
    checksum: str


class VoteKind(str, enum.Enum):
    """A write task's vote after pre-commit."""

    YES = "yes"
    NO = "no"
    ALREADY_COMMITTED = "already-committed"


@dataclass(frozen=True, kw_only=True)
class Vote:
    """One write partition's vote for one epoch."""

    epoch: int
    partition: int
    kind: VoteKind
    rows: int = 0
    checksum: str = ""
    error: str | None = None


class PartitionOutcome(str, enum.Enum):
    """What a write task reports back to the coordinator."""

    COMMITTED = "committed"
    ALREADY_COMMITTED = "already-committed"
    PREPARED = "prepared"  # coordinator-completable participants only
    ABORTED = "aborted"


@dataclass(frozen=True, kw_only=True)
class PartitionReport:
    """Result of one write task for one epoch."""

    epoch: int
    partition: int
    outcome: PartitionOutcome
    rows: int = 0
    checksum: str = ""
    error: str | None = None
    votes: tuple[Vote, ...] = field(default_factory=tuple)


class Participant(abc.ABC, Generic[Rows]):
    """Task-side handle on one write partition of one sink (for example one producer).

    A one-pass writer: the rows of a write task can be read once, so the contract never
    asks for them twice. Call order, enforced by :func:`txn._task.run_partition` (the protocol
    in full: docs/architecture.md, section 2):

    1. ``committed_marker()`` once, right after ``Resource.open`` (which fences any older
       instance of the same partition and aborts its open work);
    2. marker of a later epoch: nothing else (the epoch is committed here);
       marker of this epoch: ``summarize(rows)``, a read-only pass whose summary must
       equal the marker's (the epoch is committed here, or the replay differs);
       otherwise: ``begin(epoch)``, ``summary = write(rows)`` (writes inside the
       transaction and summarizes in the same pass), ``pre_commit(summary)``;
    3. ``commit()`` or ``abort()``; ``abort()`` is safe at any point and idempotent;
    4. ``close()`` always.

    A participant whose prepared work can be completed by the coordinator from another
    process (PostgreSQL ``PREPARE TRANSACTION``) leaves it prepared after step 2 and
    the coordinator finishes it through :class:`Resource`.
    """

    @abc.abstractmethod
    def committed_marker(self) -> Marker | None:
        """Return the marker of the last epoch this partition committed, if any."""

    @abc.abstractmethod
    def summarize(self, rows: Rows) -> RowSummary:
        """Read ``rows`` without writing; return their count and deterministic checksum."""

    @abc.abstractmethod
    def begin(self, epoch: int) -> None:
        """Start the transaction of ``epoch``."""

    @abc.abstractmethod
    def write(self, rows: Rows) -> RowSummary:
        """Write ``rows`` inside the open transaction; return their count and checksum."""

    @abc.abstractmethod
    def pre_commit(self, summary: RowSummary) -> None:
        """Make the transaction durable-but-invisible with the marker in it; raise on failure."""

    @abc.abstractmethod
    def commit(self) -> None:
        """Make the pre-committed transaction visible."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Discard the open transaction, if any. Idempotent."""

    def close(self) -> None:  # optional hook, nothing to release by default
        """Release resources (connections, producers)."""


class Resource(abc.ABC, Generic[Rows]):
    """Driver-side, picklable description of a sink: opens participants, finishes 2PC.

    ``completable_by_coordinator`` says whether a prepared transaction can be committed
    or rolled back by the coordinator from another process (PostgreSQL: yes; Kafka: no,
    librdkafka cannot resume another instance's transaction, so Kafka tasks commit
    their own transactions and recovery redoes the missing part of the epoch).
    """

    completable_by_coordinator: bool = False
    # Whether committed_markers works from the driver: then the coordinator may defer the
    # completion of a commit-in-task epoch (docs/architecture.md, "Deferred completion").
    reads_markers: bool = False

    def completes(self, partition: int) -> bool:
        """Whether the coordinator completes ``partition``'s prepared work.

        The resource's flag for every partition, except in a composite resource (one epoch
        across several systems, :class:`~txn.CompositeResource`), where it is the flag of
        the member that owns the partition.
        """
        return self.completable_by_coordinator

    @abc.abstractmethod
    def open(self, plan: EpochPlan, partition: int) -> Participant[Rows]:
        """Create the participant for ``partition`` (called inside the write task)."""

    @abc.abstractmethod
    def fingerprint(self) -> str:
        """Stable digest of the sink configuration that affects where rows land."""

    def abort_lingering(self, partitions: Iterable[int]) -> None:
        """Abort open work left by earlier runs on ``partitions`` (start-up, shrink)."""

    def commit_prepared(self, plan: EpochPlan, partition: int) -> None:
        """Commit the prepared work of ``partition`` in ``plan``; idempotent."""
        msg = f"{type(self).__name__} cannot complete prepared work from the coordinator"
        raise NotImplementedError(msg)

    def rollback_prepared(self, plan: EpochPlan, partition: int) -> None:
        """Roll back the prepared work of ``partition`` in ``plan``; idempotent."""
        msg = f"{type(self).__name__} cannot complete prepared work from the coordinator"
        raise NotImplementedError(msg)

    def prepared_partitions(self, plan: EpochPlan) -> Sequence[int]:
        """Partitions of ``plan`` whose work is still prepared (in doubt)."""
        return ()

    def committed_markers(self, plan: EpochPlan) -> Mapping[int, Marker | None]:
        """Read the committed marker of every partition of ``plan`` from the driver.

        Used to settle an epoch in doubt that no replay will complete (``txn._settle``).
        """
        msg = f"{type(self).__name__} cannot read its markers from the driver"
        raise NotImplementedError(msg)
