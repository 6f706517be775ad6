"""The crash matrix of the 2PC core, for any resource: crash points, cases and a driver world.

A connector runs the txn core's crash matrix against its own resource by subclassing
:class:`CrashWorld` (what is durable: its database and its epoch log; what a crash drops:
every in-process object) and parametrizing a test over :func:`crash_params`. Each case
crashes once (or as stated) at one protocol step during epoch 1 of 3; the world restarts
the driver (a new epoch log handle, a new resource, ``Coordinator.recover()``) and
replays the epoch as Spark would, then :func:`run_crash_case` checks exactly-once.
The failure table the cases come from: docs/architecture.md, section 5.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple

from txn._coordinator import Coordinator
from txn._deferred import DeferredCompletionLog
from txn._errors import TxnCode, TxnError
from txn._executor import InProcessExecutor
from txn._history import EpochHistory
from txn._log import EpochLog
from txn._model import CommitMode, EpochPlan, Guarantee, Resource, Rows, Vote
from txn._outcome import EpochResult
from txn._steps import CoordinatorStep, TaskStep

# The cases a crash world treats as a crash (the driver restarts and replays the epoch),
# whatever ``retry_stage`` says: a partition that failed, or lost its prepared work.
_REDONE_CODES = frozenset({TxnCode.EPOCH_ABORTED, TxnCode.PARTICIPANT, TxnCode.PREPARED_WORK_LOST})


class SimulatedCrash(BaseException):
    """Raised by crash hooks: the process "dies" here, no cleanup code runs.

    A BaseException (not an Exception) so that ``except Exception`` blocks in the protocol
    do not treat it as an ordinary failure and abort on its behalf.
    """


# Participant kinds the cases apply to: a resource that commits in the task (Kafka, an
# idempotency table), one the coordinator completes (PostgreSQL two-phase), and one epoch
# across both (``txn.CompositeResource``).
KAFKA_LIKE = "commit-in-task"
PG_LIKE = "prepared"
MIXED = "mixed"
KINDS = (KAFKA_LIKE, PG_LIKE, MIXED)
# Driver restarts one replay may need; more means recovery does not converge (a livelock).
MAX_RESTARTS = 20
# Epochs a crash case runs; the crash fires in epoch 1, so there is one before and after.
CASE_EPOCHS = 3
# Shapes of the epochs a world writes: ordinary ones, every odd epoch empty (no row in any
# write partition; a case's crash fires in such an epoch), one row per epoch (every other
# partition empty). Empty partitions still prepare or commit an empty transaction.
FULL = "full"
EMPTY = "empty"
ONE_ROW = "one-row"
SHAPES = (FULL, EMPTY, ONE_ROW)


def epoch_size(epoch: int, shape: str, full: int) -> int:
    """Return how many rows ``epoch`` holds in ``shape`` (``full`` for an ordinary epoch)."""
    if shape == EMPTY and epoch % 2 == 1:
        return 0
    return 1 if shape == ONE_ROW else full


@dataclass(kw_only=True)
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

    def fresh(self) -> Crash:
        """Return a copy that has not fired yet (a case's crash is shared between runs)."""
        return dataclasses.replace(self, seen=0, fired=0)

    def maybe_fire(self, where: str, step: object, epoch: int, partition: int | None) -> None:
        """Raise :class:`SimulatedCrash` if this call is the one to crash at."""
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
            msg = f"crash at {where} {step} epoch {epoch} p{partition}"
            raise SimulatedCrash(msg)


def _require(condition: bool, message: str) -> None:
    """Fail the test with ``message`` (explicit, so it holds under ``python -O`` too)."""
    if not condition:
        raise AssertionError(message)


C = CoordinatorStep
T = TaskStep

# (id, crash, kinds it applies to, aligned-only); the worlds run 3 write partitions.
CASES: list[tuple[str, Crash, tuple[str, ...], bool]] = [
    ("coord-after-plan", Crash(where="coordinator", step=C.PLAN_LOGGED), KINDS, False),
    ("coord-after-1-vote", Crash(where="vote", after=1), KINDS, True),
    ("coord-after-2-votes", Crash(where="vote", after=2), KINDS, True),
    ("coord-after-all-votes", Crash(where="vote", after=3), KINDS, True),
    ("coord-after-kafka-votes", Crash(where="vote", after=2), (MIXED,), True),
    (
        "coord-after-acks-before-outcome",
        Crash(where="coordinator", step=C.REPORTS_RECEIVED),
        KINDS,
        False,
    ),
    (
        "coord-after-decision",
        Crash(where="coordinator", step=C.DECISION_LOGGED),
        (PG_LIKE, MIXED),
        False,
    ),
    (
        "coord-delivered-1-of-3",
        Crash(where="coordinator", step=C.PARTITION_DELIVERED),
        (PG_LIKE, MIXED),
        False,
    ),
    (
        "coord-delivered-2-of-3",
        Crash(where="coordinator", step=C.PARTITION_DELIVERED, after=2),
        (PG_LIKE, MIXED),
        False,
    ),
    (
        "coord-delivery-then-again-in-recovery",
        Crash(where="coordinator", step=C.PARTITION_DELIVERED, after=1, times=2),
        (PG_LIKE, MIXED),
        False,
    ),
    (
        "coord-after-delivery-before-completion",
        Crash(where="coordinator", step=C.DELIVERED),
        (PG_LIKE, MIXED),
        False,
    ),
    ("coord-after-completion", Crash(where="coordinator", step=C.COMPLETED), KINDS, False),
    # after the call for epoch 0 returned (Spark committed it), before the plan of epoch 1
    # is durable: epoch 0's deferred completion is lost ("Deferred completion")
    ("coord-before-next-plan", Crash(where="coordinator", step=C.BEFORE_PLAN), KINDS, False),
    ("task-p1-after-open", Crash(where="task", step=T.OPENED, partition=1), KINDS, False),
    ("task-p1-after-write", Crash(where="task", step=T.WRITTEN, partition=1), KINDS, False),
    (
        "task-p1-after-pre-commit",
        Crash(where="task", step=T.PRE_COMMITTED, partition=1),
        KINDS,
        False,
    ),
    ("task-all-after-pre-commit", Crash(where="task", step=T.PRE_COMMITTED, after=3), KINDS, False),
    ("task-p1-after-decision", Crash(where="task", step=T.DECIDED, partition=1), KINDS, False),
    ("task-p2-after-decision", Crash(where="task", step=T.DECIDED, partition=2), KINDS, False),
    (
        "task-p1-after-commit-before-ack",
        Crash(where="task", step=T.COMMITTED, partition=1),
        (KAFKA_LIKE, MIXED),
        False,
    ),
    (
        "task-p1-after-decision-twice",
        Crash(where="task", step=T.DECIDED, partition=1, times=2),
        KINDS,
        False,
    ),
]


class CrashCase(NamedTuple):
    """One case of the matrix: a participant kind, a commit mode, a crash, and its id."""

    id: str
    kind: str
    mode: CommitMode
    crash: Crash


def crash_cases(
    kinds: Sequence[str], modes: Sequence[CommitMode] = tuple(CommitMode)
) -> Iterator[CrashCase]:
    """Yield the cases of :data:`CASES` for the participant kinds and commit modes given."""
    for case_id, crash, applies, aligned_only in CASES:
        for kind in (k for k in kinds if k in applies):
            for mode in modes:
                if aligned_only and mode is not CommitMode.ALIGNED:
                    continue
                yield CrashCase(f"{kind}-{mode.value}-{case_id}", kind, mode, crash)


def crash_params(
    kinds: Sequence[str], modes: Sequence[CommitMode] = tuple(CommitMode)
) -> list[Any]:
    """Return the cases of :func:`crash_cases` as ``pytest.param(kind, mode, crash, id=...)``.

    Parametrize ``("kind", "mode", "crash")`` with it. Needs pytest (imported here only).
    """
    import pytest

    return [pytest.param(c.kind, c.mode, c.crash, id=c.id) for c in crash_cases(kinds, modes)]


@dataclass(kw_only=True)
class CrashWorld(abc.ABC, Generic[Rows]):
    """A sink's durable state and the driver process that crashes and restarts over it.

    Subclass it (a dataclass) and supply:

    * :meth:`open_log`: a new handle on the sink's durable epoch log;
    * :meth:`new_resource`: the resource a new driver builds (run whatever the driver runs
      before the first epoch here, e.g. creating control tables);
    * :meth:`rows_for`: the rows of write partition ``p`` of a plan, the same at every
      replay (route them by content, as the Spark stage does);
    * :meth:`check_exactly_once`: after ``n`` epochs, every row once in the external
      system, nothing open or prepared left, the markers agreeing; call
      :meth:`check_log` from it;
    * optionally :meth:`check_atomic` (run after every recovery: a coordinator-completable
      resource shows every epoch all-or-nothing), :meth:`on_coordinator_step` and
      :meth:`on_task_step` (actions at protocol steps, before the crashes fire).

    :meth:`run_epoch` runs an epoch like Spark: a crash, an aborted epoch or any error
    the stage would retry (``txn.can_retry_stage``) kills the driver (:meth:`crash`), a
    new one starts and replays the epoch; an error no re-run can fix is raised.
    The write stage runs in :class:`txn._executor.InProcessExecutor` (a thread per partition).
    """

    mode: CommitMode = CommitMode.ALIGNED
    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    parallelism: int = 3
    sink_id: str = "sink-a"
    crashes: list[Crash] = field(default_factory=list)
    restarts: int = 0
    log: EpochLog | None = None
    coordinator: Coordinator[Rows] | None = None
    resource: Resource[Rows] | None = None
    after_recover: list[str] = field(default_factory=list)

    # -- what a connector supplies -----------------------------------------------------
    @abc.abstractmethod
    def open_log(self) -> EpochLog:
        """Open a new handle on the sink's durable epoch log."""

    @abc.abstractmethod
    def new_resource(self) -> Resource[Rows]:
        """Build the resource a newly started driver uses."""

    @abc.abstractmethod
    def rows_for(self, plan: EpochPlan, partition: int) -> Rows:
        """Return the rows of write partition ``partition`` of ``plan`` (read once)."""

    @abc.abstractmethod
    def check_exactly_once(self, epochs: int) -> None:
        """Assert epochs ``0..epochs-1`` are applied exactly once and nothing is left open."""

    def check_atomic(self) -> str:
        """Return what is wrong right after a recovery ("" if nothing)."""
        return ""

    def on_coordinator_step(self, step: CoordinatorStep, epoch: int) -> None:
        """Run before the crashes at each coordinator step (default: nothing)."""

    def on_task_step(self, step: TaskStep, plan: EpochPlan, partition: int) -> None:
        """Run before the crashes at each task step (default: nothing)."""

    # -- processes -------------------------------------------------------------------
    def start(self) -> Coordinator[Rows]:
        """Start a driver process: open the log, build the resource and coordinator, recover.

        The log defers completions as the Spark stage's does (:class:`DeferredCompletionLog`).
        """
        self.log = DeferredCompletionLog(self.open_log())
        self.resource = self.new_resource()
        self.coordinator = Coordinator(
            self.log,
            self.resource,
            sink_id=self.sink_id,
            guarantee=self.guarantee,
            mode=self.mode,
            hooks=self._coordinator_hook,
        )
        self.coordinator.recover()
        self.after_recover.append(self.check_atomic())
        return self.coordinator

    def crash(self) -> None:
        """Kill the driver: its log handle is released; every in-process object is gone.

        A deferred completion is lost with the process (nothing flushes it).
        """
        log = self.log.inner if isinstance(self.log, DeferredCompletionLog) else self.log
        if log is not None:
            log.close()
        self.log = self.coordinator = self.resource = None
        self.restarts += 1
        _require(
            self.restarts <= MAX_RESTARTS, f"recovery does not converge in {MAX_RESTARTS} restarts"
        )

    def close(self) -> None:
        """End the test: release the log handle (no restart is counted)."""
        if self.log is not None:
            self.log.close()
        self.log = self.coordinator = self.resource = None

    def _coordinator_hook(self, step: CoordinatorStep, epoch: int) -> None:
        self.on_coordinator_step(step, epoch)
        for crash in self.crashes:
            crash.maybe_fire("coordinator", step, epoch, None)

    def _task_hook(self, step: TaskStep, plan: EpochPlan, partition: int) -> None:
        self.on_task_step(step, plan, partition)
        for crash in self.crashes:
            crash.maybe_fire("task", step, plan.epoch, partition)

    def _vote_hook(self, vote: Vote, count: int) -> None:
        for crash in self.crashes:
            crash.maybe_fire("vote", None, vote.epoch, None)

    def executor(self) -> InProcessExecutor[Rows]:
        """Return the write stage's executor of the running driver (call :meth:`start` first)."""
        if self.resource is None:
            msg = "no driver is running: call start() first"
            raise RuntimeError(msg)
        return InProcessExecutor(
            self.resource, self.rows_for, task_hooks=self._task_hook, vote_hook=self._vote_hook
        )

    # -- driving ---------------------------------------------------------------------
    def run_epoch(self, epoch: int) -> EpochResult:
        """Run ``epoch`` like Spark: on a failure, restart the driver and replay it."""
        while True:
            try:
                coordinator = self.coordinator or self.start()
                return coordinator.run_epoch(epoch, self.parallelism, self.executor())
            except SimulatedCrash:
                self.crash()
            except TxnError as exc:
                if exc.code not in _REDONE_CODES and not exc.retry_stage:
                    raise
                self.crash()

    def run_epochs(self, n: int) -> list[EpochResult]:
        """Run epochs ``0..n-1``."""
        return [self.run_epoch(e) for e in range(n)]

    # -- invariants ------------------------------------------------------------------
    def history(self) -> EpochHistory:
        """Return the epoch log's history (through the running driver's handle, or a new one)."""
        if self.log is not None:
            return self.log.load()
        with self.open_log() as log:
            return log.load()

    def check_log(self, epochs: int) -> None:
        """Assert the log says epochs ``0..epochs-1`` committed and nothing is in doubt."""
        wrong = [m for m in self.after_recover if m]
        _require(not wrong, f"a recovery left the sink inconsistent: {wrong}")
        history = self.history()
        missing = [e for e in range(epochs) if not history.is_committed(e)]
        _require(not missing, f"epochs {missing} are not committed in the log: {history}")
        _require(not history.in_doubt(), f"epochs in doubt: {history.in_doubt()}")


def run_crash_case(world: CrashWorld[Any], crash: Crash, epochs: int = CASE_EPOCHS) -> None:
    """Run one case of the matrix on ``world`` and assert exactly-once.

    Runs ``epochs`` epochs with a fresh copy of ``crash``, then asserts that the crash
    fired as often as asked (a case whose crash point is never reached proves nothing),
    that the driver restarted, that every epoch committed, and ``world.check_exactly_once``.
    """
    crash = crash.fresh()
    world.crashes = [crash]
    results = world.run_epochs(epochs)
    _require(
        crash.fired == crash.times,
        f"{crash} fired {crash.fired} of {crash.times} times: the test proves nothing",
    )
    _require(world.restarts >= 1, "the crash did not restart the driver")
    _require([r.epoch for r in results] == list(range(epochs)), f"results {results}")
    _require(all(r.committed for r in results), f"an epoch did not commit: {results}")
    world.check_exactly_once(epochs)
    world.close()
