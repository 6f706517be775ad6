"""The PostgreSQL resource under the txn coordinator: modes, faults, fencing, bad input."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from connectors.postgres import CommitProtocol, PostgresCode, PostgresSinkError
from connectors.postgres._control import qualified
from connectors.postgres._errors import WRITE_CODES as PG_WRITE_CODES
from connectors.postgres._resource import prepare_resource
from connectors.postgres._twophase import Gid, list_prepared, prepare
from connectors.stage import ArrowPartition
from integration_tests.postgres._world import KAFKA_LIKE, PG_LIKE, PgWorld, partition_batch
from integration_tests.postgres.conftest import with_hash
from txn import CoordinatorStep, EpochPlan, RowSummary, TaskStep
from txn._task import run_partition
from txn.testing import SimulatedCrash

KINDS = (PG_LIKE, KAFKA_LIKE)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("write_mode", ["append", "upsert"])
def test_epochs_commit_and_a_replay_of_a_committed_epoch_is_a_no_op(
    postgres_dsn: str, schema: str, kind: str, write_mode: str
) -> None:
    world = PgWorld(lambda: postgres_dsn, schema, kind, write_mode=write_mode)
    world.create_table()
    results = world.run_epochs(3)
    assert [r.committed and not r.skipped for r in results] == [True] * 3
    assert world.coordinator is not None and world.resource is not None
    assert world.resource.completable_by_coordinator is (kind == PG_LIKE)
    replay = world.coordinator.run_epoch(2, 3, world.executor())
    assert replay.skipped and replay.committed
    world.check_exactly_once(3)


@pytest.mark.parametrize("kind", KINDS)
def test_a_server_restart_between_prepare_and_commit_completes_the_epoch(
    own_server: Any, kind: str
) -> None:
    with psycopg.connect(own_server.dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA s")
    world = PgWorld(lambda: own_server.dsn, "s", kind)
    world.create_table()
    world.on_step[CoordinatorStep.REPORTS_RECEIVED] = own_server.restart
    world.run_epochs(3)
    assert CoordinatorStep.REPORTS_RECEIVED not in world.on_step  # the restart happened
    world.check_exactly_once(3)


def test_a_server_crash_after_the_decision_is_finished_by_recovery(own_server: Any) -> None:
    with psycopg.connect(own_server.dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA s")
    world = PgWorld(lambda: own_server.dsn, "s", PG_LIKE)
    world.create_table()

    def crash_both() -> None:
        own_server.kill()  # kill -9: prepared transactions and the logged decision survive
        own_server.start()
        raise SimulatedCrash("driver and server die after the decision")

    world.on_step[CoordinatorStep.DECISION_LOGGED] = crash_both
    world.run_epochs(3)
    assert world.restarts == 1
    world.check_exactly_once(3)


@pytest.mark.parametrize("kind", KINDS)
def test_a_connection_lost_mid_epoch_aborts_it_and_the_replay_completes_it(
    postgres_dsn: str, schema: str, pg: Any, kind: str
) -> None:
    world = PgWorld(lambda: postgres_dsn, schema, kind)
    world.create_table()
    cut: list[bool] = []

    def cut_connection(step: TaskStep, plan: EpochPlan, partition: int) -> None:
        if (step, plan.epoch, partition) == (TaskStep.WRITTEN, 1, 1) and not cut:
            cut.extend(
                row[0]
                for row in pg.execute(
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (f"eos {schema}-sink p1",),
                ).fetchall()
            )

    world.on_task = cut_connection
    world.run_epochs(3)
    assert cut == [True] and world.restarts >= 1
    world.check_exactly_once(3)


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_row_aborts_the_epoch_with_a_typed_error_and_leaves_nothing(
    postgres_dsn: str, schema: str, kind: str
) -> None:
    def batch(epoch: int, parallelism: int, partition: int) -> pa.RecordBatch:
        good = partition_batch(epoch, parallelism, partition)
        if (epoch, partition) != (1, 1):
            return good
        payload = pa.array([None] * good.num_rows, pa.string())  # violates NOT NULL
        return with_hash({"id": good.column(0), "epoch": good.column(1), "payload": payload})

    world = PgWorld(lambda: postgres_dsn, schema, kind, batch_for=batch)
    with world.conn() as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id bigint, epoch integer, payload text NOT NULL)").format(
                qualified(schema, "t")
            )
        )
    world.run_epoch(0)
    with pytest.raises(
        PostgresSinkError,
        match="23502",
        check=lambda e: e.code is PostgresCode.CONSTRAINT_VIOLATION,
    ) as info:
        world.run_epoch(1)
    assert info.value.column == "payload" and not info.value.retry_stage
    world.crash()
    world.start()  # recovery rolls back whatever partitions prepared
    assert {epoch for _, epoch in world.ids()} <= {0, 1}
    assert sorted(i for i, e in world.ids() if e == 0) == sorted(
        i for p in range(3) for i in partition_batch(0, 3, p).column(0).to_pylist()
    )
    if kind == PG_LIKE:
        assert [e for _, e in world.ids() if e == 1] == []  # nothing of the epoch is visible
    with world.conn() as conn:
        assert list_prepared(conn, f"{schema}-sink") == []


@pytest.mark.parametrize("kind", KINDS)
def test_opening_a_partition_fences_an_older_instance(
    postgres_dsn: str, schema: str, kind: str
) -> None:
    world = PgWorld(lambda: postgres_dsn, schema, kind, parallelism=1)
    world.create_table()
    world.start()
    resource = world.resource
    assert resource is not None
    plan = EpochPlan(
        sink_id=f"{schema}-sink", epoch=0, parallelism=1, fingerprint=resource.fingerprint()
    )
    zombie = resource.open(plan, 0)  # an older attempt of the task, still running
    assert zombie.committed_marker() is None
    zombie.begin(0)
    zombie.write(ArrowPartition([partition_batch(0, 1, 0)]))
    report = run_partition(resource, plan, 0, ArrowPartition([partition_batch(0, 1, 0)]))
    if kind == PG_LIKE:
        resource.commit_prepared(plan, 0)
    with pytest.raises(
        PostgresSinkError,
        match="terminat|closed|connection",
        check=lambda e: e.code in PG_WRITE_CODES,
    ):
        zombie.pre_commit(RowSummary(report.rows, report.checksum))  # its session is gone
    zombie.abort()
    zombie.close()
    assert report.rows == 12 and len(world.ids()) == 12


def test_auto_mode_uses_the_idempotency_table_without_prepared_transactions(
    own_server_without_2pc: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = own_server_without_2pc
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA s")
    world = PgWorld(lambda: server.dsn, "s", KAFKA_LIKE)
    world.create_table()
    auto = dataclasses.replace(world.cfg(), commit_protocol=CommitProtocol.AUTO)
    with caplog.at_level(logging.INFO, logger="connectors.postgres"):
        resource = prepare_resource(auto)
    assert not resource.completable_by_coordinator
    assert "max_prepared_transactions=0" in caplog.text and "idempotency table" in caplog.text
    forced = dataclasses.replace(auto, commit_protocol=CommitProtocol.TWO_PHASE)
    with pytest.raises(
        PostgresSinkError,
        match="max_prepared_transactions",
        check=lambda e: e.code is PostgresCode.TWO_PHASE_UNAVAILABLE,
    ):
        prepare_resource(forced)
    world.run_epochs(2)
    world.check_exactly_once(2)


def test_idempotency_mode_refuses_prepared_work_left_by_a_two_phase_run(
    postgres_dsn: str, schema: str
) -> None:
    world = PgWorld(lambda: postgres_dsn, schema, KAFKA_LIKE)
    world.create_table()
    world.run_epoch(0)
    world.crash()
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 1, 'x')").format(qualified(schema, "t")))
        prepare(conn, Gid(sink_id=f"{schema}-sink", epoch=1, attempt=0, partition=2))
    with pytest.raises(
        PostgresSinkError,
        match="commit_protocol='two-phase'",
        check=lambda e: e.code is PostgresCode.LINGERING_PREPARED,
    ):
        world.start()
