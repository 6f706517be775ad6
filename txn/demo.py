"""Demo of the two-phase-commit core: epochs with injected crashes, recovery, exactly once.

Run ``python -m txn.demo [--epochs N] [--seed S]``. For both participant kinds (commit in
the task like Kafka, coordinator-completable like PostgreSQL) it:

1. runs N epochs of rows through a Coordinator with a FileEpochLog in a temporary directory;
2. crashes the driver or a write task at a random protocol step in most epochs (every
   in-process object is dropped, only the log file and the in-memory "external system"
   survive), restarts, recovers and replays the epoch as Spark would;
3. prints what was committed per epoch and checks every row is there exactly once.

Exit code 0 if the exactly-once check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from txn._coordinator import Coordinator
from txn._errors import TxnCode, TxnError
from txn._executor import InProcessExecutor
from txn._log import FileEpochLog
from txn._model import CommitMode, EpochPlan, Resource
from txn._steps import CoordinatorStep, TaskStep
from txn.testing import CommitInTaskResource, MemoryStore, PreparedResource, SimulatedCrash
from txn.testing._participants import MemRows, OnePassRows, partition_rows

ROWS_PER_EPOCH = 20
PARALLELISM = 3
MAX_RESTARTS_PER_EPOCH = 10  # more restarts than this means recovery does not converge
# The errors the demo treats as the process dying: a partition that failed or lost its work.
_CRASH_CODES = frozenset({TxnCode.EPOCH_ABORTED, TxnCode.PARTICIPANT, TxnCode.PREPARED_WORK_LOST})

_COORDINATOR_POINTS = {
    "commit-in-task": [
        CoordinatorStep.PLAN_LOGGED,
        CoordinatorStep.REPORTS_RECEIVED,
        CoordinatorStep.COMPLETED,
    ],
    "prepared": list(CoordinatorStep),
}
_TASK_POINTS = {
    "commit-in-task": [
        TaskStep.OPENED,
        TaskStep.PRE_COMMITTED,
        TaskStep.DECIDED,
        TaskStep.COMMITTED,
    ],
    "prepared": [TaskStep.OPENED, TaskStep.PRE_COMMITTED, TaskStep.DECIDED],
}


def rows_of(epoch: int) -> list[str]:
    """Return the rows of one epoch (what Spark would replay identically)."""
    return [f"epoch{epoch}-row{i}" for i in range(ROWS_PER_EPOCH)]


@dataclass(kw_only=True)
class _Injector:
    """Fires one crash at a chosen point of a chosen epoch."""

    epoch: int
    where: str  # "coordinator" or "task"
    step: CoordinatorStep | TaskStep
    partition: int
    fired: bool = False

    def coordinator(self, step: CoordinatorStep, epoch: int) -> None:
        if (
            not self.fired
            and self.where == "coordinator"
            and (epoch, step) == (self.epoch, self.step)
        ):
            self.fired = True
            msg = f"driver killed at {step.value}"
            raise SimulatedCrash(msg)

    def task(self, step: TaskStep, plan: EpochPlan, partition: int) -> None:
        if (
            not self.fired
            and self.where == "task"
            and (plan.epoch, step, partition) == (self.epoch, self.step, self.partition)
        ):
            self.fired = True
            msg = f"task p{partition} killed at {step.value}"
            raise SimulatedCrash(msg)

    def label(self) -> str:
        who = "driver" if self.where == "coordinator" else f"task p{self.partition}"
        return f"{who} @ {self.step.value}" if self.fired else "-"


@dataclass(kw_only=True)
class _EpochRow:
    epoch: int
    crash: str
    restarts: int
    attempts: int
    rows: int = 0
    ok: bool = False
    notes: list[str] = field(default_factory=list)


def _run_kind(kind: str, mode: CommitMode, epochs: int, rng: random.Random) -> list[_EpochRow]:
    store = MemoryStore()
    out: list[_EpochRow] = []
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "epochs.log"
        for epoch in range(epochs):
            where = rng.choice(["coordinator", "task", "none"])
            step: CoordinatorStep | TaskStep = (
                rng.choice(_COORDINATOR_POINTS[kind])
                if where == "coordinator"
                else rng.choice(_TASK_POINTS[kind])
            )
            injector = _Injector(
                epoch=epoch, where=where, step=step, partition=rng.randrange(PARALLELISM)
            )
            restarts, attempt = 0, 0
            while True:
                resource: Resource[MemRows] = (
                    CommitInTaskResource(store)
                    if kind == "commit-in-task"
                    else PreparedResource(store)
                )
                log = FileEpochLog(log_path, sink_id=f"demo-{kind}")
                try:
                    coordinator = Coordinator(
                        log,
                        resource,
                        sink_id=f"demo-{kind}",
                        mode=mode,
                        hooks=injector.coordinator,
                    )
                    coordinator.recover()
                    executor = InProcessExecutor(
                        resource,
                        lambda plan, p: OnePassRows(
                            partition_rows(rows_of(plan.epoch), plan.parallelism)[p]
                        ),
                        task_hooks=injector.task,
                    )
                    result = coordinator.run_epoch(epoch, PARALLELISM, executor)
                    attempt = result.plan.attempt if result.plan else attempt
                    break
                except (SimulatedCrash, TxnError) as exc:
                    if isinstance(exc, TxnError) and exc.code not in _CRASH_CODES:
                        raise
                    restarts += 1  # the process died; only the log file and the store remain
                    if restarts > MAX_RESTARTS_PER_EPOCH:
                        raise
                finally:
                    log.close()
            out.append(
                _EpochRow(
                    epoch=epoch, crash=injector.label(), restarts=restarts, attempts=attempt + 1
                )
            )
        _check(store, out)
    return out


def _check(store: MemoryStore, rows: list[_EpochRow]) -> None:
    by_epoch = store.rows_by_epoch()
    twice = Counter((c.epoch, c.partition) for c in store.commits)
    for row in rows:
        got = by_epoch.get(row.epoch, [])
        row.rows = len(got)
        row.ok = sorted(got) == sorted(rows_of(row.epoch))
        if any(n > 1 for (e, _), n in twice.items() if e == row.epoch):
            row.ok = False
            row.notes.append("a partition committed twice")
    if store.dangling():
        rows[-1].ok = False
        rows[-1].notes.append(f"left open: {store.dangling()}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m txn.demo", description=__doc__)
    parser.add_argument("--epochs", type=int, default=6, help="epochs per participant kind")
    parser.add_argument("--seed", type=int, default=7, help="seed of the crash schedule")
    args = parser.parse_args(argv)
    console = Console()
    rng = random.Random(args.seed)  # noqa: S311 - a crash schedule, not cryptography
    all_ok = True
    for kind, mode in [
        ("commit-in-task", CommitMode.ALIGNED),
        ("commit-in-task", CommitMode.UNALIGNED),
        ("prepared", CommitMode.ALIGNED),
    ]:
        table = Table(title=f"{kind} participants, {mode.value} commit, parallelism {PARALLELISM}")
        for column in ("epoch", "injected crash", "restarts", "attempts", "rows", "exactly once"):
            table.add_column(column, no_wrap=True)
        with console.status(f"running {args.epochs} epochs ({kind}, {mode.value}) ..."):
            results = _run_kind(kind, mode, args.epochs, rng)
        for row in results:
            all_ok &= row.ok
            verdict = "[green]yes[/]" if row.ok else f"[red]NO[/] {'; '.join(row.notes)}"
            table.add_row(
                str(row.epoch),
                row.crash,
                str(row.restarts),
                str(row.attempts),
                f"{row.rows}/{ROWS_PER_EPOCH}",
                verdict,
            )
        console.print(table)
    console.print("exactly once: [green]OK[/]" if all_ok else "exactly once: [red]FAILED[/]")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
