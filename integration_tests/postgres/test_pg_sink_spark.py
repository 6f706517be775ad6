"""PostgresSink through real Spark: each write mode and protocol, replays, bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from psycopg import sql

from connectors.postgres import PostgresCode, PostgresSinkError
from connectors.stage import StageCode
from integration_tests.postgres._queries import table_sink
from txn._model import PartitionOutcome

pytestmark = pytest.mark.spark

PROTOCOLS = ["two-phase", "idempotency-table"]


def table(pg: Any, schema: str, ddl: str) -> None:
    pg.execute(sql.SQL("CREATE TABLE {}.t (" + ddl + ")").format(sql.Identifier(schema)))


def rows(pg: Any, schema: str, order: str = "id") -> list[tuple[Any, ...]]:
    query = sql.SQL("SELECT * FROM {}.t ORDER BY " + order).format(sql.Identifier(schema))
    return [tuple(r) for r in pg.execute(query).fetchall()]


@pytest.mark.compat
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_append_epochs_land_once_and_a_replay_is_skipped(spark, pg, schema, postgres_dsn, protocol):
    table(pg, schema, "id bigint PRIMARY KEY, name text")
    s = table_sink(postgres_dsn, schema, commit_protocol=protocol)
    try:
        for epoch in range(3):
            df = spark.range(epoch * 50, (epoch + 1) * 50, numPartitions=3).selectExpr(
                "id", "concat('n', id) AS name"
            )
            result = s(df, epoch)
            assert result.committed and not result.skipped
            expected = {
                PartitionOutcome.PREPARED if protocol == "two-phase" else PartitionOutcome.COMMITTED
            }
            assert {r.outcome for r in result.reports} == expected
        assert s(spark.range(100, 150).selectExpr("id", "'x' AS name"), 2).skipped
    finally:
        s.close()
    assert rows(pg, schema) == [(i, f"n{i}") for i in range(150)]
    prepared = pg.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
    assert prepared is not None and prepared[0] == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_upsert_and_changelog_keep_the_last_change_of_each_key(
    spark, pg, schema, postgres_dsn, protocol
):
    table(pg, schema, "id bigint PRIMARY KEY, v text")
    up = table_sink(
        postgres_dsn,
        schema,
        write_mode="upsert",
        key_columns=["id"],
        commit_protocol=protocol,
        order_by=["seq"],
    )
    try:
        up(
            spark.createDataFrame(
                [(1, "a", 0), (2, "b", 1), (1, "c", 2)], "id long, v string, seq long"
            ).select("id", "v", "seq"),
            0,
        )
    finally:
        up.close()
    assert rows(pg, schema) == [(1, "c"), (2, "b")]


def test_changelog_applies_inserts_updates_and_deletes(spark, pg, schema, postgres_dsn):
    table(pg, schema, "id bigint PRIMARY KEY, v text")
    cl = table_sink(
        postgres_dsn, schema, write_mode="changelog", key_columns=["id"], order_by=["seq"]
    )
    data: list[tuple[Any, ...]] = [
        (1, "a", "insert", 0),
        (2, "b", "insert", 1),
        (3, "c", "insert", 2),
        (2, "b", "update_before", 3),
        (2, "B", "update_after", 4),
        (3, "c", "delete", 5),
    ]
    try:
        cl(spark.createDataFrame(data, "id long, v string, op string, seq long"), 0)
    finally:
        cl.close()
    assert rows(pg, schema) == [(1, "a"), (2, "B")]


@pytest.mark.parametrize(
    ("ddl", "select", "column"),
    [
        ("id bigint PRIMARY KEY, name text", ["id", "'x' AS missing"], "missing"),
        ("id integer PRIMARY KEY, name text", ["id", "'x' AS name"], "id"),  # long into int
    ],
    ids=["missing-column", "type-mismatch"],
)
def test_bad_input_is_a_typed_error_naming_the_column(
    spark, pg, schema, postgres_dsn, ddl, select, column
):
    table(pg, schema, ddl)
    s = table_sink(postgres_dsn, schema)
    try:
        with pytest.raises(
            PostgresSinkError,
            check=lambda e: e.code in (StageCode.INPUT_SCHEMA, PostgresCode.SCHEMA_EVOLUTION),
        ) as info:
            s(spark.range(5).selectExpr(*select), 0)
    finally:
        s.close()
    assert info.value.column == column
    assert rows(pg, schema) == []


def test_missing_table_is_refused_before_anything_is_written(spark, schema, postgres_dsn):
    s = table_sink(postgres_dsn, schema)
    try:
        with pytest.raises(Exception, match="does not exist|not found"):
            s(spark.range(3).selectExpr("id"), 0)
    finally:
        s.close()


def test_violated_constraint_aborts_the_epoch_with_nothing_visible(spark, pg, schema, postgres_dsn):
    table(pg, schema, "id bigint PRIMARY KEY, name text CHECK (name <> 'bad')")
    s = table_sink(postgres_dsn, schema, stage_retries=0)
    try:
        df: Callable[[str], Any] = lambda bad: spark.range(40).selectExpr(
            "id", f"CASE WHEN id = 7 THEN '{bad}' ELSE 'ok' END AS name"
        )
        with pytest.raises(Exception, match="(?i)constraint|check"):
            s(df("bad"), 0)
        assert rows(pg, schema) == []
        assert s(df("fine"), 0).committed  # the replay with good data commits
    finally:
        s.close()
    assert len(rows(pg, schema)) == 40


@pytest.mark.compat
def test_timestamps_are_checked_and_written_in_the_session_time_zone(
    spark, pg, schema, postgres_dsn
):
    table(pg, schema, "id bigint PRIMARY KEY, at timestamptz")
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    s = table_sink(postgres_dsn, schema)
    try:
        df = spark.range(4).selectExpr(
            "id", "to_utc_timestamp(timestamp_seconds(1700000000 + id), 'UTC') AS at"
        )
        assert s(df, 0).committed
    finally:
        s.close()
        spark.conf.set("spark.sql.session.timeZone", previous)
    got = pg.execute(
        sql.SQL("SELECT id, extract(epoch FROM at)::bigint FROM {}.t ORDER BY id").format(
            sql.Identifier(schema)
        )
    ).fetchall()
    assert [tuple(r) for r in got] == [(i, 1_700_000_000 + i) for i in range(4)]
