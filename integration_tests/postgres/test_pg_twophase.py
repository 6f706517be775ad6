"""PostgreSQL's two-phase commit as the sink uses it: prepare, finish by gid, restrictions."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from connectors.postgres._control import qualified
from connectors.postgres._twophase import (
    Gid,
    commit_prepared,
    list_prepared,
    max_prepared_transactions,
    prepare,
    rollback_prepared,
)
from integration_tests.postgres.conftest import Conn


def count(pg: Conn, schema: str) -> int:
    row = pg.execute(sql.SQL("SELECT count(*) FROM {}").format(qualified(schema, "t"))).fetchone()
    assert row is not None
    return int(row[0])


def prepared_insert(dsn: str, schema: str, gid: Gid, value: int) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(qualified(schema, "t")), (value,))
        prepare(conn, gid)


def test_prepared_work_is_invisible_until_committed_from_another_session(
    pg: Conn, schema: str, postgres_dsn: str
) -> None:
    assert max_prepared_transactions(pg) > 0
    pg.execute(sql.SQL("CREATE TABLE {} (x int)").format(qualified(schema, "t")))
    sink = f"{schema}-sink"
    one, two = (
        Gid(sink_id=sink, epoch=5, attempt=0, partition=1),
        Gid(sink_id=sink, epoch=5, attempt=0, partition=2),
    )
    prepared_insert(postgres_dsn, schema, one, 1)
    prepared_insert(postgres_dsn, schema, two, 2)
    prepared_insert(
        postgres_dsn, schema, Gid(sink_id=f"{sink}x", epoch=5, attempt=0, partition=1), 3
    )  # another sink
    assert count(pg, schema) == 0
    assert list_prepared(pg, sink) == [one, two]
    assert commit_prepared(pg, one) is True
    assert commit_prepared(pg, one) is False  # idempotent: already finished
    assert rollback_prepared(pg, two) is True
    assert rollback_prepared(pg, two) is False
    assert count(pg, schema) == 1 and list_prepared(pg, sink) == []
    assert rollback_prepared(pg, Gid(sink_id=f"{sink}x", epoch=5, attempt=0, partition=1))


def test_a_gid_in_use_cannot_be_prepared_twice(pg: Conn, schema: str, postgres_dsn: str) -> None:
    pg.execute(sql.SQL("CREATE TABLE {} (x int)").format(qualified(schema, "t")))
    gid = Gid(sink_id=f"{schema}-sink", epoch=1, attempt=0, partition=0)
    prepared_insert(postgres_dsn, schema, gid, 1)
    with pytest.raises(errors.DuplicateObject):  # a zombie's second PREPARE fails
        prepared_insert(postgres_dsn, schema, gid, 2)
    rollback_prepared(pg, gid)
    assert count(pg, schema) == 0


def test_prepare_refuses_temporary_tables_so_the_load_table_is_unlogged(
    pg: Conn, schema: str, postgres_dsn: str
) -> None:
    """Why the upsert load table is a regular UNLOGGED table, not a TEMP one."""
    pg.execute(sql.SQL("CREATE TABLE {} (x int)").format(qualified(schema, "t")))
    gid = Gid(sink_id=f"{schema}-sink", epoch=1, attempt=0, partition=0)
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TEMP TABLE load (x int)")
        conn.execute("INSERT INTO load VALUES (1)")
        conn.execute(sql.SQL("INSERT INTO {} SELECT x FROM load").format(qualified(schema, "t")))
        with pytest.raises(errors.FeatureNotSupported, match="temporary"):
            prepare(conn, gid)
    with psycopg.connect(postgres_dsn) as conn:
        unlogged = qualified(schema, "load")
        conn.execute(sql.SQL("CREATE UNLOGGED TABLE {} (x int)").format(unlogged))
        conn.commit()
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(unlogged))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT x FROM {}").format(qualified(schema, "t"), unlogged)
        )
        conn.execute(sql.SQL("TRUNCATE {}").format(unlogged))
        prepare(conn, gid)
    assert commit_prepared(pg, gid) and count(pg, schema) == 1


def test_prepared_transactions_survive_a_crash_and_a_restart(own_server: Any) -> None:
    dsn = own_server.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x int)")
    gid = Gid(sink_id="crash-sink", epoch=3, attempt=1, partition=0)
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO t VALUES (42)")
        prepare(conn, gid)
    own_server.kill()
    own_server.start()
    with psycopg.connect(own_server.dsn, autocommit=True) as conn:
        assert list_prepared(conn, "crash-sink") == [gid]
        assert commit_prepared(conn, gid)
        assert conn.execute("SELECT x FROM t").fetchall() == [(42,)]
