"""Crash-injection harness for the protocol tests: a "world" of durable state and processes.

Durable: the epoch log file and the MemoryStore (the external system). In-process (dropped
at every crash): the FileEpochLog handle, the resource, the coordinator, the channel.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from txn import (
    CommitMode,
    CompositeResource,
    Coordinator,
    CoordinatorStep,
    EpochAbortedError,
    EpochPlan,
    EpochResult,
    FileEpochLog,
    Guarantee,
    InProcessChannel,
    Member,
    ParticipantError,
    Resource,
    TaskStep,
    Vote,
)
from txn.testing import (
    CommitInTaskResource,
    MemoryStore,
    MemRows,
    OnePassRows,
    PreparedResource,
    SimulatedCrash,
    partition_rows,
)

KAFKA_LIKE = "commit-in-task"
PG_LIKE = "prepared"
MIXED = "mixed"  # one epoch across a commit-in-task and a prepared resource
KINDS = (KAFKA_LIKE, PG_LIKE, MIXED)
MIXED_SPLIT = (2, 2)  # write partitions of the Kafka-like and the PG-like member
SINK = "sink-a"
ROWS_PER_EPOCH = 12
MAX_RESTARTS = 20  # a replay loop that needs more restarts than this is a livelock: fail


FULL = "full"  # every epoch: ROWS_PER_EPOCH rows, in every write partition
EMPTY = "empty"  # odd epochs hold no row at all (every partition empty)
ONE_ROW = "one-row"  # every epoch holds one row (every other partition empty)
SHAPES = (FULL, EMPTY, ONE_ROW)


def epoch_rows(epoch: int, shape: str = FULL) -> list[str]:
    if shape == EMPTY and epoch % 2 == 1:
        return []
    count = 1 if shape == ONE_ROW else ROWS_PER_EPOCH
    return [f"e{epoch}-r{i}" for i in range(count)]


@dataclass
class Crash:
    """Where to crash. Fires on the ``after``-th matching call, up to ``times`` times."""

    where: str  # "coordinator" | "task" | "vote"
    step: CoordinatorStep | TaskStep | None = None
    epoch: int = 1
    partition: int | None = None  # task crashes: only this partition (None: any)
    after: int = 1
    times: int = 1
    seen: int = 0
    fired: int = 0

    def maybe_fire(self, where: str, step: object, epoch: int, partition: int | None) -> None:
        if self.fired >= self.times or where != self.where or epoch != self.epoch:
            return
        if self.step is not None and step != self.step:
            return
        if self.partition is not None and partition != self.partition:
            return
        self.seen += 1
        if self.seen >= self.after:
            self.fired += 1
            self.seen = 0
            raise SimulatedCrash(f"crash at {where} {step} epoch {epoch} p{partition}")


@dataclass
class Loss:
    """Prepared work of write ``partition`` lost (rolled back by hand) at coordinator ``step``."""

    epoch: int = 1
    partition: int = 0
    step: CoordinatorStep = CoordinatorStep.DECISION_LOGGED
    fired: bool = False


@dataclass
class World:
    tmp_path: Path
    kind: str
    mode: CommitMode = CommitMode.ALIGNED
    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    parallelism: int = 3
    store: MemoryStore = field(default_factory=MemoryStore)
    pg_store: MemoryStore = field(default_factory=MemoryStore)  # MIXED: the PG-like member
    crashes: list[Crash] = field(default_factory=list)
    losses: list[Loss] = field(default_factory=list)
    shape: str = FULL
    restarts: int = 0
    log: FileEpochLog | None = None
    coordinator: Coordinator[MemRows] | None = None
    resource: Resource[MemRows] | None = None
    after_recover: list[str] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.tmp_path / "epochs.log"

    def __post_init__(self) -> None:
        if self.kind == MIXED:
            self.parallelism = sum(MIXED_SPLIT)

    def new_resource(self, fingerprint: str = "v1") -> Resource[MemRows]:
        if self.kind == KAFKA_LIKE:
            return CommitInTaskResource(self.store, fingerprint)
        if self.kind == MIXED:
            return CompositeResource([
                Member(CommitInTaskResource(self.store, fingerprint), MIXED_SPLIT[0]),
                Member(PreparedResource(self.pg_store, fingerprint), MIXED_SPLIT[1]),
            ])
        return PreparedResource(self.store, fingerprint)

    def rows_for(self, plan: EpochPlan, partition: int) -> OnePassRows:
        """The rows of a write partition: each member writes every row of the epoch."""
        if self.kind == MIXED:
            member, local = (0, partition) if partition < MIXED_SPLIT[0] else (
                1, partition - MIXED_SPLIT[0])
            rows = partition_rows(self.rows_of(plan.epoch), MIXED_SPLIT[member])
            return OnePassRows(rows[local])
        return OnePassRows(partition_rows(self.rows_of(plan.epoch), plan.parallelism)[partition])

    def rows_of(self, epoch: int) -> list[str]:
        """Every row of ``epoch`` (each member of a mixed resource writes all of them)."""
        return epoch_rows(epoch, self.shape)

    # -- processes -------------------------------------------------------------------
    def start(self) -> Coordinator[MemRows]:
        """Start a driver process: open the log, build the coordinator, recover."""
        self.log = FileEpochLog(self.log_path, sink_id=SINK)
        self.resource = self.new_resource()
        self.coordinator = Coordinator(
            self.log, self.resource, sink_id=SINK, guarantee=self.guarantee, mode=self.mode,
            hooks=self._coordinator_hook,
        )
        self.coordinator.recover()
        self.after_recover.append(self.check_atomic_after_recovery())
        return self.coordinator

    def crash(self) -> None:
        """The driver dies: the OS releases its lock; every in-process object is gone."""
        if self.log is not None:
            self.log.close()
        self.log = self.coordinator = self.resource = None
        self.restarts += 1
        assert self.restarts <= MAX_RESTARTS, "recovery does not converge"

    def _coordinator_hook(self, step: CoordinatorStep, epoch: int) -> None:
        for loss in self.losses:
            if not loss.fired and (loss.step, loss.epoch) == (step, epoch):
                loss.fired = True
                self.lose_prepared(epoch, loss.partition)
        for crash in self.crashes:
            crash.maybe_fire("coordinator", step, epoch, None)

    def _task_hook(self, step: TaskStep, plan: EpochPlan, partition: int) -> None:
        for crash in self.crashes:
            crash.maybe_fire("task", step, plan.epoch, partition)

    def _vote_hook(self, vote: Vote, count: int) -> None:
        for crash in self.crashes:
            crash.maybe_fire("vote", None, vote.epoch, None)

    def lose_prepared(self, epoch: int, partition: int) -> None:
        """Roll back the prepared work of write ``partition`` of ``epoch`` by hand."""
        store, local = self.store, partition
        if self.kind == MIXED:
            store, local = self.pg_store, partition - MIXED_SPLIT[0]
        with store.lock:
            for key in [k for k, t in store.prepared.items()
                        if (t.epoch, t.partition) == (epoch, local)]:
                del store.prepared[key]

    def channel(self) -> InProcessChannel[MemRows]:
        assert self.resource is not None
        return InProcessChannel(
            self.resource,
            self.rows_for,
            task_hooks=self._task_hook,
            vote_hook=self._vote_hook,
        )

    # -- driving ---------------------------------------------------------------------
    def run_epoch(self, epoch: int) -> EpochResult:
        """Run ``epoch`` like Spark: on any failure restart the driver and replay it."""
        while True:
            try:
                if self.coordinator is None:
                    self.start()
                assert self.coordinator is not None
                return self.coordinator.run_epoch(epoch, self.parallelism, self.channel())
            except (SimulatedCrash, EpochAbortedError, ParticipantError):
                self.crash()

    def run_epochs(self, n: int) -> list[EpochResult]:
        return [self.run_epoch(e) for e in range(n)]

    # -- invariants ------------------------------------------------------------------
    def check_atomic_after_recovery(self) -> str:
        """After recovery a prepared (2PC) store holds every epoch all-or-nothing; mixed: the
        PG-like store never shows an epoch the Kafka-like store does not fully hold."""
        if self.kind == KAFKA_LIKE:
            return ""
        pg = self.pg_store if self.kind == MIXED else self.store
        by_epoch: dict[int, set[int]] = {}
        for commit in pg.commits:
            by_epoch.setdefault(commit.epoch, set()).add(commit.partition)
        assert self.log is not None
        history = self.log.load()
        bad = []
        lost = {loss.epoch for loss in self.losses if loss.fired}  # partly visible until redone
        for epoch, parts in by_epoch.items():
            if epoch in lost:
                continue
            plan = history.plan(epoch)
            width = MIXED_SPLIT[1] if self.kind == MIXED else (plan.parallelism if plan else -1)
            if parts != set(range(width)):
                bad.append(epoch)
        if self.kind == MIXED:
            kafka = self.store.rows_by_epoch()
            bad += [e for e in by_epoch if sorted(kafka.get(e, [])) != sorted(self.rows_of(e))]
        return f"partly committed epochs after recovery: {bad}" if bad else ""

    def check_exactly_once(self, n: int) -> None:
        stores = [self.store, self.pg_store] if self.kind == MIXED else [self.store]
        for store in stores:
            per_commit = Counter((c.epoch, c.partition) for c in store.commits)
            twice = {k: v for k, v in per_commit.items() if v > 1}
            assert not twice, f"partitions committed more than once: {twice}"
            got = store.rows_by_epoch()
            for epoch in range(n):
                assert sorted(got.get(epoch, [])) == sorted(self.rows_of(epoch)), f"epoch {epoch}"
            assert set(got) <= set(range(n)), f"unexpected epochs {set(got) - set(range(n))}"
            assert store.dangling() == [], store.dangling()
        assert [m for m in self.after_recover if m] == []
        with FileEpochLog(self.log_path, sink_id=SINK) if self.log is None else _Borrow(
            self.log
        ) as log:
            history = log.load()
        assert all(history.is_committed(e) for e in range(n)), history
        assert history.in_doubt() == []
        if self.guarantee is Guarantee.EXACTLY_ONCE:  # every partition commits, empty or not
            for index, store in enumerate(stores):
                want = {(e, p) for e in range(n) if (plan := history.plan(e)) is not None
                        for p in range(MIXED_SPLIT[index] if self.kind == MIXED
                                       else plan.parallelism)}
                got_parts = {(c.epoch, c.partition) for c in store.commits if c.epoch < n}
                assert got_parts == want, f"partitions committed: {sorted(got_parts ^ want)}"


class _Borrow:
    def __init__(self, log: FileEpochLog) -> None:
        self.log = log

    def __enter__(self) -> FileEpochLog:
        return self.log

    def __exit__(self, *exc: object) -> None:
        return None


# -- the crash matrix: every protocol step, both kinds, both modes ---------------------------
C = CoordinatorStep
T = TaskStep

# (id, crash factory, kinds it applies to, aligned-only)
CASES: list[tuple[str, Crash, tuple[str, ...], bool]] = [
    ("coord-after-plan", Crash("coordinator", C.PLAN_LOGGED), KINDS, False),
    ("coord-after-1-vote", Crash("vote", after=1), KINDS, True),
    ("coord-after-2-votes", Crash("vote", after=2), KINDS, True),
    ("coord-after-all-votes", Crash("vote", after=3), KINDS, True),
    ("coord-after-kafka-votes", Crash("vote", after=2), (MIXED,), True),
    ("coord-after-acks-before-outcome", Crash("coordinator", C.REPORTS_RECEIVED), KINDS, False),
    ("coord-after-decision", Crash("coordinator", C.DECISION_LOGGED), (PG_LIKE, MIXED), False),
    ("coord-delivered-1-of-3", Crash("coordinator", C.PARTITION_DELIVERED), (PG_LIKE, MIXED), False),
    (
        "coord-delivered-2-of-3",
        Crash("coordinator", C.PARTITION_DELIVERED, after=2),
        (PG_LIKE, MIXED),
        False,
    ),
    (
        "coord-delivery-then-again-in-recovery",
        Crash("coordinator", C.PARTITION_DELIVERED, after=1, times=2),
        (PG_LIKE, MIXED),
        False,
    ),
    ("coord-after-delivery-before-completion", Crash("coordinator", C.DELIVERED), (PG_LIKE, MIXED), False),
    ("coord-after-completion", Crash("coordinator", C.COMPLETED), KINDS, False),
    ("task-p1-after-open", Crash("task", T.OPENED, partition=1), KINDS, False),
    ("task-p1-after-write", Crash("task", T.WRITTEN, partition=1), KINDS, False),
    ("task-p1-after-pre-commit", Crash("task", T.PRE_COMMITTED, partition=1), KINDS, False),
    ("task-all-after-pre-commit", Crash("task", T.PRE_COMMITTED, after=3), KINDS, False),
    ("task-p1-after-decision", Crash("task", T.DECIDED, partition=1), KINDS, False),
    ("task-p2-after-decision", Crash("task", T.DECIDED, partition=2), KINDS, False),
    ("task-p1-after-commit-before-ack", Crash("task", T.COMMITTED, partition=1), (KAFKA_LIKE, MIXED), False),
    (
        "task-p1-after-decision-twice",
        Crash("task", T.DECIDED, partition=1, times=2),
        KINDS,
        False,
    ),
]


def crash_params(kinds: tuple[str, ...]) -> list[object]:
    """``(kind, mode, crash)`` cases of :data:`CASES` for the participant kinds given."""
    out: list[object] = []
    for case_id, crash, applies, aligned_only in CASES:
        for kind in (k for k in kinds if k in applies):
            for mode in CommitMode:
                if aligned_only and mode is CommitMode.UNALIGNED:
                    continue
                out.append(pytest.param(kind, mode, crash, id=f"{kind}-{mode.value}-{case_id}"))
    return out
