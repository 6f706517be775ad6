"""Crash-injection harness for the protocol tests: a "world" of durable state and processes.

Durable: the epoch log file and the MemoryStore (the external system). In-process (dropped
at every crash): the FileEpochLog handle, the resource, the coordinator, the channel.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from txn import (
    CommitMode,
    Coordinator,
    CoordinatorStep,
    EpochAbortedError,
    EpochPlan,
    EpochResult,
    FileEpochLog,
    Guarantee,
    InProcessChannel,
    ParticipantError,
    Resource,
    TaskStep,
    Vote,
)
from txn._memory import (
    CommitInTaskResource,
    MemoryStore,
    MemRows,
    PreparedResource,
    SimulatedCrash,
    partition_rows,
)

KAFKA_LIKE = "commit-in-task"
PG_LIKE = "prepared"
KINDS = (KAFKA_LIKE, PG_LIKE)
SINK = "sink-a"
ROWS_PER_EPOCH = 12
MAX_RESTARTS = 20  # a replay loop that needs more restarts than this is a livelock: fail


def epoch_rows(epoch: int) -> list[str]:
    return [f"e{epoch}-r{i}" for i in range(ROWS_PER_EPOCH)]


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
class World:
    tmp_path: Path
    kind: str
    mode: CommitMode = CommitMode.ALIGNED
    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    parallelism: int = 3
    store: MemoryStore = field(default_factory=MemoryStore)
    crashes: list[Crash] = field(default_factory=list)
    restarts: int = 0
    log: FileEpochLog | None = None
    coordinator: Coordinator[MemRows] | None = None
    resource: Resource[MemRows] | None = None
    after_recover: list[str] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.tmp_path / "epochs.log"

    def new_resource(self, fingerprint: str = "v1") -> Resource[MemRows]:
        if self.kind == KAFKA_LIKE:
            return CommitInTaskResource(self.store, fingerprint)
        return PreparedResource(self.store, fingerprint)

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
        for crash in self.crashes:
            crash.maybe_fire("coordinator", step, epoch, None)

    def _task_hook(self, step: TaskStep, plan: EpochPlan, partition: int) -> None:
        for crash in self.crashes:
            crash.maybe_fire("task", step, plan.epoch, partition)

    def _vote_hook(self, vote: Vote, count: int) -> None:
        for crash in self.crashes:
            crash.maybe_fire("vote", None, vote.epoch, None)

    def channel(self) -> InProcessChannel[MemRows]:
        assert self.resource is not None
        return InProcessChannel(
            self.resource,
            lambda plan, p: partition_rows(epoch_rows(plan.epoch), plan.parallelism)[p],
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
        """For prepared (2PC) sinks, after recovery every epoch is all-or-nothing."""
        if self.kind != PG_LIKE:
            return ""
        by_epoch: dict[int, set[int]] = {}
        for commit in self.store.commits:
            by_epoch.setdefault(commit.epoch, set()).add(commit.partition)
        assert self.log is not None
        history = self.log.load()
        bad = []
        for epoch, parts in by_epoch.items():
            plan = history.plan(epoch)
            if plan is None or set(range(plan.parallelism)) != parts:
                bad.append(epoch)
        return f"partly committed epochs after recovery: {bad}" if bad else ""

    def check_exactly_once(self, n: int) -> None:
        per_commit = Counter((c.epoch, c.partition) for c in self.store.commits)
        twice = {k: v for k, v in per_commit.items() if v > 1}
        assert not twice, f"partitions committed more than once: {twice}"
        got = self.store.rows_by_epoch()
        for epoch in range(n):
            assert sorted(got.get(epoch, [])) == sorted(epoch_rows(epoch)), f"epoch {epoch}"
        assert set(got) <= set(range(n)), f"unexpected epochs {set(got) - set(range(n))}"
        assert self.store.dangling() == [], self.store.dangling()
        assert [m for m in self.after_recover if m] == []
        with FileEpochLog(self.log_path, sink_id=SINK) if self.log is None else _Borrow(
            self.log
        ) as log:
            history = log.load()
        assert all(history.is_committed(e) for e in range(n)), history
        assert history.in_doubt() == []


class _Borrow:
    def __init__(self, log: FileEpochLog) -> None:
        self.log = log

    def __enter__(self) -> FileEpochLog:
        return self.log

    def __exit__(self, *exc: object) -> None:
        return None
