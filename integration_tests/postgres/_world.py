"""Crash-injection world for the PostgreSQL resource: real server, txn coordinator, threads.

Durable: the PostgreSQL database (table, markers, epoch log, prepared transactions). In
process (dropped at every simulated driver crash): the epoch log handle, the resource, the
coordinator, the channel. The crash points are those of tests/txn/harness.py (``Crash``).
"""

from __future__ import annotations

import functools
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from connectors.postgres import (
    PostgresEpochLog,
    PostgresResource,
    PostgresSinkConfig,
    check_input,
    describe_table,
    list_prepared,
    prepare_resource,
    read_markers,
)
from connectors.postgres._control import qualified
from connectors.stage import ArrowPartition
from integration_tests.postgres.conftest import with_hash
from tests.txn.harness import EMPTY, FULL, KAFKA_LIKE, ONE_ROW, PG_LIKE, Crash
from txn import (
    CommitMode,
    Coordinator,
    CoordinatorStep,
    EpochAbortedError,
    EpochPlan,
    EpochResult,
    InProcessChannel,
    ParticipantError,
    TaskStep,
    TxnError,
    Vote,
)
from txn.testing import SimulatedCrash

ROWS_PER_EPOCH = 12
MAX_RESTARTS = 20
PROTOCOL = {KAFKA_LIKE: "idempotency-table", PG_LIKE: "two-phase"}

__all__ = ["KAFKA_LIKE", "PG_LIKE", "Crash", "PgWorld"]


def epoch_ids(epoch: int, shape: str = FULL) -> list[int]:
    """The ids of ``epoch``'s rows; ``shape`` as in tests/txn/harness.py (empty, one row)."""
    if shape == EMPTY and epoch % 2 == 1:
        return []
    return [epoch * 1000 + i for i in range(1 if shape == ONE_ROW else ROWS_PER_EPOCH)]


def partition_batch(
    epoch: int, parallelism: int, partition: int, shape: str = FULL
) -> pa.RecordBatch:
    """The rows of ``partition``: routed by content, so a replay meets the same partition."""
    ids = [i for i in epoch_ids(epoch, shape)
           if zlib.crc32(str(i).encode()) % parallelism == partition]
    return with_hash({
        "id": pa.array(ids, pa.int64()),
        "epoch": pa.array([epoch] * len(ids), pa.int32()),
        "payload": pa.array([f"row {i}" for i in ids]),
    })


@dataclass
class PgWorld:
    """One sink over one schema; ``dsn`` is read anew at every start (servers may move)."""

    dsn: Callable[[], str]
    schema: str
    kind: str
    mode: CommitMode = CommitMode.ALIGNED
    parallelism: int = 3
    write_mode: str = "append"
    crashes: list[Crash] = field(default_factory=list)
    on_step: dict[CoordinatorStep, Callable[[], None]] = field(default_factory=dict)
    on_task: Callable[[TaskStep, EpochPlan, int], None] | None = None
    restarts: int = 0
    log: PostgresEpochLog | None = None
    coordinator: Coordinator[ArrowPartition] | None = None
    resource: PostgresResource | None = None
    after_recover: list[str] = field(default_factory=list)
    batch_for: Callable[[int, int, int], pa.RecordBatch] = partition_batch
    shape: str = FULL

    def __post_init__(self) -> None:
        if self.shape != FULL and self.batch_for is partition_batch:
            self.batch_for = functools.partial(partition_batch, shape=self.shape)

    def cfg(self) -> PostgresSinkConfig:
        return PostgresSinkConfig.build(
            dsn=self.dsn(), table="t", schema=self.schema, sink_id=f"{self.schema}-sink",
            control_schema=self.schema, commit_protocol=PROTOCOL[self.kind],
            write_mode=self.write_mode,
        )

    def conn(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.dsn(), autocommit=True)

    def create_table(self) -> None:
        key = " PRIMARY KEY" if self.write_mode != "append" else ""
        with self.conn() as conn:
            conn.execute(sql.SQL(f"CREATE TABLE {{}} (id bigint{key}, epoch integer, payload text)")
                         .format(qualified(self.schema, "t")))

    # -- processes -------------------------------------------------------------------
    def start(self) -> Coordinator[ArrowPartition]:
        """Start a driver: open the log, prepare the resource, recover."""
        cfg = self.cfg()
        self.log = PostgresEpochLog(cfg)
        resource = prepare_resource(cfg)
        with self.conn() as conn:
            table = describe_table(conn, self.schema, "t")
        self.resource = resource.with_layout(check_input(self.batch_for(0, 1, 0).schema, table, cfg))
        self.coordinator = Coordinator(
            self.log, self.resource, sink_id=cfg.sink_id, mode=self.mode, hooks=self._coord_hook
        )
        self.coordinator.recover()
        self.after_recover.append(self.check_atomic())
        return self.coordinator

    def crash(self) -> None:
        """The driver dies: its sessions end; every in-process object is gone."""
        if self.log is not None:
            self.log.close()
        self.log = self.coordinator = self.resource = None
        self.restarts += 1
        assert self.restarts <= MAX_RESTARTS, "recovery does not converge"

    def _coord_hook(self, step: CoordinatorStep, epoch: int) -> None:
        action = self.on_step.pop(step, None) if epoch == 1 else None
        if action is not None:
            action()
        for crash in self.crashes:
            crash.maybe_fire("coordinator", step, epoch, None)

    def _task_hook(self, step: TaskStep, plan: EpochPlan, partition: int) -> None:
        if self.on_task is not None:
            self.on_task(step, plan, partition)
        for crash in self.crashes:
            crash.maybe_fire("task", step, plan.epoch, partition)

    def _vote_hook(self, vote: Vote, count: int) -> None:
        for crash in self.crashes:
            crash.maybe_fire("vote", None, vote.epoch, None)

    def channel(self) -> InProcessChannel[ArrowPartition]:
        assert self.resource is not None
        return InProcessChannel(
            self.resource,
            lambda plan, p: ArrowPartition([self.batch_for(plan.epoch, plan.parallelism, p)]),
            task_hooks=self._task_hook, vote_hook=self._vote_hook,
        )

    def run_epoch(self, epoch: int) -> EpochResult:
        """Run ``epoch`` like Spark: on a failure, restart the driver and replay it."""
        while True:
            try:
                if self.coordinator is None:
                    self.start()
                assert self.coordinator is not None
                return self.coordinator.run_epoch(epoch, self.parallelism, self.channel())
            except (SimulatedCrash, EpochAbortedError, ParticipantError):
                self.crash()
            except TxnError as exc:
                if not getattr(type(exc), "retry_stage", True):
                    raise
                self.crash()

    def run_epochs(self, n: int) -> list[EpochResult]:
        return [self.run_epoch(e) for e in range(n)]

    # -- invariants ------------------------------------------------------------------
    def ids(self) -> list[tuple[int, int]]:
        with self.conn() as conn:
            return conn.execute(
                sql.SQL("SELECT id, epoch FROM {}").format(qualified(self.schema, "t"))
            ).fetchall()

    def check_atomic(self) -> str:
        """Two-phase: after a recovery every epoch is all or nothing."""
        if self.kind != PG_LIKE:
            return ""
        per_epoch = Counter(epoch for _, epoch in self.ids())
        partial = {e: n for e, n in per_epoch.items() if n != len(epoch_ids(e, self.shape))}
        return f"partly committed epochs after recovery: {partial}" if partial else ""

    def check_exactly_once(self, n: int) -> None:
        rows = self.ids()
        counts = Counter(i for i, _ in rows)
        assert not [i for i, c in counts.items() if c > 1], "duplicated rows"
        assert sorted(counts) == [i for e in range(n) for i in epoch_ids(e, self.shape)], "lost"
        cfg = self.cfg()
        with self.conn() as conn:
            assert list_prepared(conn, cfg.sink_id) == [], "prepared transactions left"
            markers = read_markers(conn, self.schema, cfg.sink_id)
        assert {p: m.epoch for p, m in markers.items()} == dict.fromkeys(
            range(self.parallelism), n - 1
        ), markers
        assert [m for m in self.after_recover if m] == []
        with PostgresEpochLog(cfg) if self.log is None else _Borrow(self.log) as log:
            history = log.load()
        assert all(history.is_committed(e) for e in range(n)) and history.in_doubt() == []


class _Borrow:
    def __init__(self, log: PostgresEpochLog) -> None:
        self.log = log

    def __enter__(self) -> PostgresEpochLog:
        return self.log

    def __exit__(self, *exc: object) -> None:
        return None
