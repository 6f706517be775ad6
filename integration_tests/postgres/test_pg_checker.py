"""The table check (``connectors.verify.check_table``) on tables a real PostgresSink wrote.

Spark writes the pipeline's rows (``connectors.demo.app._tables.table_rows``) through
``PostgresSink`` in each write mode; the check passes; then the table, the idempotency table
or ``pg_prepared_xacts`` is damaged by hand, one invariant at a time, and the check must say
which. The changelog case also pins the Spark SQL op rule to the Python one the check uses.
"""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

from connectors.demo.app._config import ORDER_COLUMNS
from connectors.demo.app._tables import create_table, record_op, table_rows
from connectors.postgres import PostgresSink
from connectors.verify import (
    AnomalyKind,
    Record,
    TableReport,
    check_table,
    make_input_value,
)

pytestmark = pytest.mark.spark

KEYS = 6
PER_EPOCH = 30
EPOCHS = 2


def records() -> list[Record]:
    seq = dict.fromkeys(range(KEYS), 0)
    out = []
    for i in range(PER_EPOCH * EPOCHS):
        k = (i * 7) % KEYS
        out.append(
            Record(
                topic="in",
                partition=k % 2,
                offset=i,
                key=f"k{k}".encode(),
                value=make_input_value(i, f"k{k}", seq[k]),
            )
        )
        seq[k] += 1
    return out


def batch(spark: Any, recs: list[Record]) -> Any:
    data = [(r.key.decode() if r.key else None, r.value, r.partition, r.offset) for r in recs]
    return spark.createDataFrame(
        data, "key STRING, value BINARY, in_partition INT, in_offset BIGINT"
    )


class Written:
    """A table written by PostgresSink from the pipeline's rows, and the check of it."""

    def __init__(self, spark: Any, dsn: str, schema: str, mode: str) -> None:
        self.dsn, self.schema, self.mode = dsn, schema, mode
        self.sink_id = f"{schema}-chk"
        self.inputs = records()
        create_table(dsn, "t", schema=schema, write_mode=mode)
        sink = PostgresSink(
            dsn,
            "t",
            self.sink_id,
            schema=schema,
            control_schema=schema,
            write_mode=mode,
            key_columns=[] if mode == "append" else ["key"],
            parallelism=2,
            order_by=list(ORDER_COLUMNS),
        )
        try:
            for epoch in range(EPOCHS):
                chunk = self.inputs[epoch * PER_EPOCH : (epoch + 1) * PER_EPOCH]
                assert sink(table_rows(batch(spark, chunk), mode), epoch).committed
        finally:
            sink.close()

    def check(self) -> TableReport:
        return check_table(
            self.dsn,
            table="t",
            schema=self.schema,
            sink_id=self.sink_id,
            control_schema=self.schema,
            inputs=self.inputs,
            write_mode=self.mode,
            op_fn=record_op if self.mode == "changelog" else None,
        )


@pytest.mark.parametrize("mode", ["append", "upsert", "changelog"])
def test_a_table_the_sink_wrote_passes(spark, postgres_dsn, schema, mode) -> None:
    report = Written(spark, postgres_dsn, schema, mode).check()
    assert report.ok, report.examples
    assert report.epoch_log_checked and report.last_committed_epoch == EPOCHS - 1
    assert report.table_rows == report.expected_rows
    if mode == "changelog":  # records 54 and 59, the last ones of k0 and k5, deleted them
        assert report.expected_rows == KEYS - 2


def test_a_duplicated_and_a_removed_row_are_found(spark, postgres_dsn, pg, schema) -> None:
    written = Written(spark, postgres_dsn, schema, "append")
    t = sql.SQL("{}.t").format(sql.Identifier(schema))
    pg.execute(sql.SQL("INSERT INTO {} SELECT * FROM {} WHERE id = 3").format(t, t))
    pg.execute(sql.SQL("DELETE FROM {} WHERE id = 11").format(t))
    report = written.check()
    assert report.count(AnomalyKind.DUPLICATE) == 1
    assert report.anomalies(AnomalyKind.LOST)[0].record_id == "11"


def test_an_overwritten_key_is_a_stale_row(spark, postgres_dsn, pg, schema) -> None:
    written = Written(spark, postgres_dsn, schema, "upsert")
    pg.execute(sql.SQL("UPDATE {}.t SET id = 0 WHERE key = 'k0'").format(sql.Identifier(schema)))
    report = written.check()
    assert report.count(AnomalyKind.STALE_ROW) == 1 and sum(report.anomaly_counts.values()) == 1


def test_a_prepared_transaction_of_the_sink_left_behind_is_found(
    spark, postgres_dsn, pg, schema
) -> None:
    written = Written(spark, postgres_dsn, schema, "append")
    gid = f"eos:{written.sink_id}:{EPOCHS}:0:1"
    with pg.transaction():
        pg.execute(
            sql.SQL("INSERT INTO {}.t VALUES (9999, 'k0', 99, 0, 9999)").format(
                sql.Identifier(schema)
            )
        )
        pg.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    try:
        report = written.check()
    finally:
        pg.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
    assert report.prepared == (gid,)
    assert report.count(AnomalyKind.OPEN_TRANSACTION) == 1
    assert report.count(AnomalyKind.UNKNOWN) == 0  # prepared rows are invisible
    assert written.check().ok


def test_markers_disagreeing_with_the_epoch_log_are_found(spark, postgres_dsn, pg, schema) -> None:
    written = Written(spark, postgres_dsn, schema, "append")
    pg.execute(
        sql.SQL("UPDATE {}.sink_markers SET epoch = epoch - 1 WHERE write_partition = 1").format(
            sql.Identifier(schema)
        )
    )
    report = written.check()
    mismatch = report.anomalies(AnomalyKind.EPOCH_LOG_MISMATCH)
    assert len(mismatch) == 1 and mismatch[0].partition == 1, report.examples
