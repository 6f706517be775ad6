"""Tables that follow the stream: ``create_table`` / ``evolve_schema`` on a real server and Spark.

A streaming query whose batches gain columns keeps running into a table the sink created
(both commit protocols); changes the sink never makes are refused with nothing written;
concurrent and replayed DDL is harmless. The crash between the ALTER and the epoch's
commit: integration_tests/e2e/test_pg_follow_chaos.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from psycopg import sql

from connectors.postgres import (
    PostgresCode,
    PostgresEpochLog,
    PostgresSinkConfig,
    PostgresSinkError,
)
from connectors.postgres._ddl import apply_layout, planned_table
from connectors.postgres._schema import check_input, describe_table, written_fields
from integration_tests.postgres._queries import (
    file_rows,
    run,
    stage_files,
    table_rows,
    table_sink,
)
from txn import EpochPlan, TxnCode, TxnError

pytestmark = pytest.mark.spark

PROTOCOLS = ["two-phase", "idempotency-table"]


def columns(pg: Any, schema: str) -> list[tuple[str, str, bool]]:
    """(name, type, nullable) of table ``t``, in order."""
    table = describe_table(pg, schema, "t")
    return [(c.name, c.type_sql, not c.not_null) for c in table.columns]


def plans(dsn: str, schema: str) -> dict[int, EpochPlan]:
    cfg = PostgresSinkConfig.build(
        dsn=dsn, table="t", schema=schema, sink_id=f"{schema}-s", control_schema=schema
    )
    log = PostgresEpochLog(cfg, read_only=True)
    try:
        return {r.epoch: r for r in log.load().records if isinstance(r, EpochPlan)}
    finally:
        log.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stream_that_gains_columns_keeps_running_into_a_table_the_sink_created(
    spark: Any, pg: Any, schema: str, postgres_dsn: str, tmp_path: Path, protocol: str
) -> None:
    from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

    sink = table_sink(
        postgres_dsn, schema, commit_protocol=protocol, create_table=True, evolve_schema=True
    )

    def write(df: Any, batch_id: int) -> None:
        # The stream gains a column at batch 1 and another at batch 2.
        if batch_id >= 1:
            df = df.withColumn("len", F.length("v"))
        if batch_id >= 2:
            df = df.withColumn("at", F.timestamp_seconds(F.col("id")))
        sink(df, batch_id)

    stage_files(tmp_path / "in", 0, 3)
    try:
        run(spark, tmp_path / "in", tmp_path / "ck", write)
        assert sink(spark.createDataFrame([], "id long, v string"), 0).skipped  # a replay
    finally:
        sink.close()
    assert columns(pg, schema) == [
        ("id", "bigint", True),
        ("v", "text", True),
        ("len", "integer", True),
        ("at", "timestamp with time zone", True),
    ]
    assert table_rows(pg, schema) == file_rows(range(3))
    got = pg.execute(
        sql.SQL(
            "SELECT id / 30, count(len), count(at), bool_and(len IS NULL OR len = length(v)), "
            "bool_and(at IS NULL OR extract(epoch FROM at)::bigint = id) FROM {}.t "
            "GROUP BY 1 ORDER BY 1"
        ).format(sql.Identifier(schema))
    ).fetchall()
    assert [tuple(r) for r in got] == [
        (0, 0, 0, True, True),
        (1, 30, 0, True, True),
        (2, 30, 30, True, True),
    ]
    # The layout of each epoch is part of its logged plan: three layouts, three fingerprints.
    assert len({p.fingerprint for p in plans(postgres_dsn, schema).values()}) == 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_upsert_table_created_with_its_key_and_evolved(
    spark: Any, pg: Any, schema: str, postgres_dsn: str, protocol: str
) -> None:
    sink = table_sink(
        postgres_dsn,
        schema,
        commit_protocol=protocol,
        write_mode="upsert",
        key_columns=["id"],
        create_table=True,
        evolve_schema=True,
    )
    try:
        assert sink(spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string"), 0).committed
        later = spark.createDataFrame([(2, "B", 2.5), (3, "c", 3.5)], "id long, v string, w double")
        assert sink(later, 1).committed
        assert sink(later, 1).skipped
    finally:
        sink.close()
    assert columns(pg, schema) == [
        ("id", "bigint", False),
        ("v", "text", True),
        ("w", "double precision", True),
    ]
    got = pg.execute(sql.SQL("SELECT * FROM {}.t ORDER BY id").format(sql.Identifier(schema)))
    assert [tuple(r) for r in got.fetchall()] == [(1, "a", None), (2, "B", 2.5), (3, "c", 3.5)]
    assert describe_table(pg, schema, "t").primary_key == ("id",)


def _table(pg: Any, schema: str, ddl: str) -> None:
    pg.execute(sql.SQL("CREATE TABLE {}.t (" + ddl + ")").format(sql.Identifier(schema)))


@pytest.mark.parametrize(
    ("ddl", "select", "column", "needed"),
    [
        ("id bigint, n integer", ["id", "id AS n", "'x' AS extra"], "n", "TYPE bigint"),
        ("id bigint, v text NOT NULL", ["id", "'x' AS extra"], "v", "DROP NOT NULL"),
    ],
    ids=["type-change", "not-null-dropped"],
)
def test_narrowing_or_dropping_is_refused_with_nothing_written(
    spark: Any,
    pg: Any,
    schema: str,
    postgres_dsn: str,
    ddl: str,
    select: list[str],
    column: str,
    needed: str,
) -> None:
    _table(pg, schema, ddl)
    before = columns(pg, schema)
    sink = table_sink(postgres_dsn, schema, evolve_schema=True)
    try:
        with pytest.raises(
            PostgresSinkError, check=lambda e: e.code is PostgresCode.SCHEMA_EVOLUTION
        ) as info:
            sink(spark.range(5).selectExpr(*select), 0)
    finally:
        sink.close()
    assert info.value.column == column and needed in info.value.needed
    assert columns(pg, schema) == before  # the gained column "extra" was not added either
    count = pg.execute(sql.SQL("SELECT count(*) FROM {}.t").format(sql.Identifier(schema)))
    assert count.fetchone()[0] == 0
    assert plans(postgres_dsn, schema) == {}  # nothing logged


def test_concurrent_and_replayed_ddl_is_harmless(pg: Any, schema: str, make_cfg: Any) -> None:
    """Sinks creating and evolving one table at once, then the same DDL again: one table."""
    import psycopg

    cfg: PostgresSinkConfig = make_cfg(create_table=True, evolve_schema=True)
    wide = pa.schema([("id", pa.int64()), ("v", pa.string()), ("w", pa.float64())])
    narrow = pa.schema([("id", pa.int64()), ("v", pa.string())])

    def layout(schema_: pa.Schema, table: Any) -> Any:
        return check_input(schema_, planned_table(table, written_fields(schema_, cfg), cfg), cfg)

    layouts = [layout(narrow, None), layout(wide, None)] * 3
    errors: list[BaseException] = []
    start = threading.Barrier(len(layouts))

    def apply(lay: Any) -> None:
        try:
            with psycopg.connect(cfg.dsn, autocommit=True) as conn:
                start.wait()
                apply_layout(conn, cfg, lay)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=apply, args=(lay,)) for lay in layouts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Whoever created the table first, the wide layout's column is there: a table created
    # by a narrow layout is evolved by the wide one, under the DDL lock.
    assert errors == [], errors
    assert columns(pg, cfg.schema) == [
        ("id", "bigint", True),
        ("v", "text", True),
        ("w", "double precision", True),
    ]
    with psycopg.connect(cfg.dsn, autocommit=True) as conn:  # a replay: nothing to do
        apply_layout(conn, cfg, layout(wide, describe_table(conn, cfg.schema, "t")))
    assert [c[0] for c in columns(pg, cfg.schema)] == ["id", "v", "w"]


def test_a_replay_in_doubt_must_write_the_layout_its_plan_recorded(
    spark: Any, pg: Any, schema: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """Idempotency table, unaligned: epoch 1 (which gained ``w``) fails after partition 0
    committed (partition 1 may have committed too: its own commit). A replay without ``w`` is refused by the plan's fingerprint, writing nothing
    (its checksum would not match partition 0's marker anyway); the replay with ``w``
    completes the epoch exactly once."""
    import json

    from connectors.testing.faults import FaultPlan, inject_faults

    pass

    faults = tmp_path / "faults.json"
    fault = {"id": "f", "step": "after_commit", "epoch": 1, "partition": 0, "action": "raise"}
    faults.write_text(json.dumps([fault]))
    sink = table_sink(
        postgres_dsn,
        schema,
        commit_protocol="idempotency-table",
        mode="unaligned",
        stage_retries=0,
        create_table=True,
        evolve_schema=True,
    )
    rows = spark.range(0, 40, numPartitions=2).selectExpr("id", "concat('v', id) AS v")
    gained = spark.range(40, 80, numPartitions=2).selectExpr(
        "id", "concat('v', id) AS v", "id * 2 AS w"
    )
    count = sql.SQL("SELECT count(*), count(w) FROM {}.t").format(sql.Identifier(schema))
    try:
        with inject_faults(FaultPlan(str(faults))):
            assert sink(rows, 0).committed
            with pytest.raises(Exception, match="InjectedFault|did not commit"):
                sink(gained, 1)
            partly = pg.execute(count).fetchone()
            assert partly[0] > 40 and partly[1] == partly[0] - 40  # partition 0's part (or more)
            with pytest.raises(TxnError, check=lambda e: e.code is TxnCode.PLAN_MISMATCH):
                sink(gained.drop("w"), 1)
            assert pg.execute(count).fetchone() == partly  # nothing written
            result = sink(gained, 1)
            assert result.committed and not result.skipped
    finally:
        sink.close()
    got = pg.execute(sql.SQL("SELECT id, w FROM {}.t ORDER BY id").format(sql.Identifier(schema)))
    assert [tuple(r) for r in got.fetchall()] == [(i, None if i < 40 else 2 * i) for i in range(80)]


def test_an_alter_blocked_by_the_sink_s_own_prepared_work_is_refused_at_once(
    spark: Any, pg: Any, schema: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """Two-phase: epoch 1 fails right after its commit decision was logged, so its prepared
    transactions (locks on the table) stay until this sink object finishes the epoch. A
    batch that needs a new column meanwhile is refused at once, changing nothing; the replay
    with the planned columns finishes epoch 1 from the log, then the column is added."""
    import json
    import time

    pass
    from connectors.testing.faults import FaultPlan, InjectedFault, inject_faults

    faults = tmp_path / "faults.json"
    fault = {"id": "f", "step": "driver_after_decision", "epoch": 1, "action": "raise"}
    faults.write_text(json.dumps([fault]))
    sink = table_sink(
        postgres_dsn,
        schema,
        commit_protocol="two-phase",
        create_table=True,
        evolve_schema=True,
    )
    batch = [
        spark.range(i * 20, (i + 1) * 20).selectExpr("id", "concat('v', id) AS v")
        for i in (0, 1, 2)
    ]
    try:
        with inject_faults(FaultPlan(str(faults))):
            assert sink(batch[0], 0).committed
            with pytest.raises(InjectedFault):
                sink(batch[1], 1)
            before = columns(pg, schema)
            started = time.monotonic()
            with pytest.raises(
                PostgresSinkError,
                match=r"epoch\(s\) \[1\]",
                check=lambda e: e.code is PostgresCode.EVOLUTION_BLOCKED,
            ):
                sink(batch[1].selectExpr("*", "id AS w"), 1)
            assert time.monotonic() - started < 30  # not the 60 s lock timeout
            assert columns(pg, schema) == before
            assert sink(batch[1], 1).skipped  # committed from the logged decision
            assert sink(batch[2].selectExpr("*", "id AS w"), 2).committed
    finally:
        sink.close()
    assert [c[0] for c in columns(pg, schema)] == ["id", "v", "w"]
    assert table_rows(pg, schema) == {(i, f"v{i}"): 1 for i in range(60)}
