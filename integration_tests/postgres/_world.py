"""Crash-injection world for the PostgreSQL resource: real server, txn coordinator, threads.

Durable: the PostgreSQL database (table, markers, epoch log, prepared transactions). In
process (dropped at every simulated driver crash): the epoch log handle, the resource, the
coordinator, the channel. The driver and the crash points are ``txn.testing``'s
(:class:`~txn.testing.CrashWorld`, :class:`~txn.testing.Crash`).
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

from connectors.postgres import PostgresEpochLog, PostgresSinkConfig, read_markers
from connectors.postgres._connect import release_driver_connection
from connectors.postgres._control import qualified
from connectors.postgres._resource import PostgresResource, prepare_resource
from connectors.postgres._schema import check_input, describe_table
from connectors.postgres._twophase import list_prepared
from connectors.stage import ArrowPartition
from integration_tests.postgres.conftest import with_hash
from txn import CoordinatorStep, EpochLog, EpochPlan, TaskStep
from txn.testing import KAFKA_LIKE, PG_LIKE, Crash, CrashWorld
from txn.testing._crash import FULL, epoch_size

ROWS_PER_EPOCH = 12
PROTOCOL = {KAFKA_LIKE: "idempotency-table", PG_LIKE: "two-phase"}

__all__ = ["KAFKA_LIKE", "PG_LIKE", "Crash", "PgWorld"]


def epoch_ids(epoch: int, shape: str = FULL) -> list[int]:
    """The ids of ``epoch``'s rows; ``shape`` one of ``txn.testing.SHAPES``."""
    return [epoch * 1000 + i for i in range(epoch_size(epoch, shape, ROWS_PER_EPOCH))]


def partition_batch(
    epoch: int, parallelism: int, partition: int, shape: str = FULL
) -> pa.RecordBatch:
    """The rows of ``partition``: routed by content, so a replay meets the same partition."""
    ids = [
        i for i in epoch_ids(epoch, shape) if zlib.crc32(str(i).encode()) % parallelism == partition
    ]
    return with_hash(
        {
            "id": pa.array(ids, pa.int64()),
            "epoch": pa.array([epoch] * len(ids), pa.int32()),
            "payload": pa.array([f"row {i}" for i in ids]),
        }
    )


@dataclass
class PgWorld(CrashWorld[ArrowPartition]):
    """One sink over one schema; ``dsn`` is read anew at every start (servers may move)."""

    dsn: Callable[[], str]
    schema: str
    kind: str
    write_mode: str = field(default="append", kw_only=True)
    on_step: dict[CoordinatorStep, Callable[[], None]] = field(default_factory=dict, kw_only=True)
    on_task: Callable[[TaskStep, EpochPlan, int], None] | None = field(default=None, kw_only=True)
    batch_for: Callable[[int, int, int], pa.RecordBatch] = field(
        default=partition_batch, kw_only=True
    )
    shape: str = field(default=FULL, kw_only=True)  # of the epochs (txn.testing.SHAPES)

    def __post_init__(self) -> None:
        self.sink_id = f"{self.schema}-sink"
        if self.shape != FULL and self.batch_for is partition_batch:
            self.batch_for = functools.partial(partition_batch, shape=self.shape)

    def cfg(self) -> PostgresSinkConfig:
        return PostgresSinkConfig.build(
            dsn=self.dsn(),
            table="t",
            schema=self.schema,
            sink_id=self.sink_id,
            control_schema=self.schema,
            commit_protocol=PROTOCOL[self.kind],
            write_mode=self.write_mode,
        )

    def conn(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.dsn(), autocommit=True)

    def create_table(self) -> None:
        key = " PRIMARY KEY" if self.write_mode != "append" else ""
        with self.conn() as conn:
            conn.execute(
                sql.SQL(f"CREATE TABLE {{}} (id bigint{key}, epoch integer, payload text)").format(
                    qualified(self.schema, "t")
                )
            )

    # -- what the crash world needs --------------------------------------------------
    def open_log(self) -> EpochLog:
        return PostgresEpochLog(self.cfg())

    def new_resource(self) -> PostgresResource:
        """What a driver does before its first epoch: prepare the resource, check the input."""
        cfg = self.cfg()
        resource = prepare_resource(cfg)
        with self.conn() as conn:
            table = describe_table(conn, self.schema, "t")
        return resource.with_layout(check_input(self.batch_for(0, 1, 0).schema, table, cfg))

    def rows_for(self, plan: EpochPlan, partition: int) -> ArrowPartition:
        return ArrowPartition([self.batch_for(plan.epoch, plan.parallelism, partition)])

    def close(self) -> None:
        """End the case: also close the process-wide driver connection of this sink.

        A sink's ``close()`` does this in production; each case has a sink id of its own, so
        without it every case would leave one server connection open until the run ends
        (a whole file of cases then exhausts ``max_connections``).
        """
        super().close()
        release_driver_connection(self.cfg())

    def on_coordinator_step(self, step: CoordinatorStep, epoch: int) -> None:
        action = self.on_step.pop(step, None) if epoch == 1 else None
        if action is not None:
            action()

    def on_task_step(self, step: TaskStep, plan: EpochPlan, partition: int) -> None:
        if self.on_task is not None:
            self.on_task(step, plan, partition)

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

    def check_exactly_once(self, epochs: int) -> None:
        rows = self.ids()
        counts = Counter(i for i, _ in rows)
        assert not [i for i, c in counts.items() if c > 1], "duplicated rows"
        want = [i for e in range(epochs) for i in epoch_ids(e, self.shape)]
        assert sorted(counts) == want, "lost rows"
        cfg = self.cfg()
        with self.conn() as conn:
            assert list_prepared(conn, cfg.sink_id) == [], "prepared transactions left"
            markers = read_markers(conn, self.schema, cfg.sink_id)
        assert {p: m.epoch for p, m in markers.items()} == dict.fromkeys(
            range(self.parallelism), epochs - 1
        ), markers
        self.check_log(epochs)
