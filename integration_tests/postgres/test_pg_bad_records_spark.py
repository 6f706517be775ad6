"""PostgresSink bad records through real Spark and a real server (docs/bad-records.md).

One micro-batch holds good rows plus two bad ones, routed to different write partitions: a
null value the server rejects (``NOT NULL``, SQLSTATE class 23, isolated under savepoints)
and a key too long for its ``varchar`` column (refused by the input check before writing).
With ``on_bad_record="dead-letter"`` the good rows must land in the table exactly once (the
table checker) and exactly those two records in the dead-letter table, once, across a failed
first attempt and a replay by a new sink object, in both commit protocols; with ``"skip"``
they are counted and nothing is dead-lettered; beyond ``max_bad_fraction`` nothing of the
epoch is visible.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from connectors.postgres import PostgresSink
from connectors.stage import StageCode, StageError
from connectors.testing import FaultPlan, inject_faults
from connectors.verify import Record, check_table
from integration_tests.postgres._queries import table_sink
from txn._model import PartitionOutcome

pytestmark = pytest.mark.spark

N = 24
PARALLELISM = 2
KEY_CHARS = 16
SCHEMA = "id long, key string, v string"


def routed(spark: Any, rows: list[tuple[Any, ...]], partition: int) -> tuple[Any, ...]:
    """The first of ``rows`` the stage routes to write ``partition``: a table without key
    columns routes by ``xxhash64(1, <every column>)``, as Spark repartitions it (murmur3
    ``hash`` of the routing column, modulo the partitions)."""
    found = (
        spark.createDataFrame(rows, SCHEMA)
        .selectExpr("*", f"pmod(hash(xxhash64(1, id, key, v)), {PARALLELISM}) AS part")
        .collect()
    )
    return next(tuple(r)[:3] for r in found if r.part == partition)


class World:
    """Table ``t`` (no key: a row written twice shows twice), the batch, its bad records."""

    def __init__(self, spark: Any, pg: Any, schema: str, dsn: str) -> None:
        self.spark, self.pg, self.schema, self.dsn = spark, pg, schema, dsn
        pg.execute(
            sql.SQL(
                "CREATE TABLE {}.t (id bigint NOT NULL, key varchar({}) NOT NULL, v text NOT NULL)"
            ).format(sql.Identifier(schema), sql.Literal(KEY_CHARS))
        )
        self.good = [(i, f"k{i % 5}", f"v{i}") for i in range(N)]
        self.null_row = routed(spark, [(1000 + i, "kn", None) for i in range(64)], 0)
        self.long_row = routed(spark, [(2000 + i, "x" * 40, "v") for i in range(64)], 1)
        self.sink_id = f"{schema}-s"

    def frame(self) -> Any:
        rows = [*self.good, self.null_row, self.long_row]
        return self.spark.createDataFrame(rows, SCHEMA).repartition(3)

    def sink(self, **options: Any) -> PostgresSink:
        return table_sink(self.dsn, self.schema, parallelism=PARALLELISM, **options)

    def assert_table_exact(self) -> None:
        inputs = [
            Record(
                topic="in",
                partition=0,
                offset=i,
                key=k.encode(),
                value=json.dumps({"id": i, "key": k}).encode(),
            )
            for i, k, _ in self.good
        ]
        report = check_table(
            self.dsn,
            table="t",
            schema=self.schema,
            control_schema=self.schema,
            sink_id=self.sink_id,
            inputs=inputs,
        )
        assert report.epoch_log_checked, report.notes
        assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
        assert report.table_rows == report.input_records == N
        assert report.prepared == ()

    def dead_letters(self) -> list[tuple[Any, ...]]:
        query = sql.SQL(
            "SELECT (record->>'id')::bigint, record->>'key', record->>'v', error_class,"
            " error_message, sink_id, batch_id, epoch, write_partition FROM {}.dead_letters"
            " ORDER BY 1"
        ).format(sql.Identifier(self.schema))
        return [tuple(r) for r in self.pg.execute(query).fetchall()]

    def assert_dead_letters(self) -> None:
        """Exactly the two bad records in the dead-letter table, once each, with their columns."""
        rows = self.dead_letters()
        assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
            (self.null_row[0], "kn", None, "constraint-violation"),
            (self.long_row[0], self.long_row[1], "v", "value-too-large"),
        ], rows
        null, long = rows
        assert "SQLSTATE 23502" in null[4]
        assert f"allows {KEY_CHARS}" in long[4]
        assert [r[5:] for r in rows] == [(self.sink_id, 0, 0, 0), (self.sink_id, 0, 0, 1)]


@pytest.fixture
def world(spark: Any, pg: Any, schema: str, postgres_dsn: str) -> World:
    return World(spark, pg, schema, postgres_dsn)


def fault_plan(tmp_path: Path, *faults: dict[str, Any]) -> FaultPlan:
    path = tmp_path / f"faults-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(list(faults)))
    return FaultPlan(str(path))


@pytest.mark.parametrize("protocol", ["two-phase", "idempotency-table"])
def test_dead_letters_exactly_the_two_bad_records_once_across_a_replay(
    world: World, tmp_path: Path, protocol: str
) -> None:
    # Every partition wrote its rows and dead letters (two-phase: prepared; idempotency
    # table: committed with its marker), then the driver fails before completing the epoch.
    faults = fault_plan(
        tmp_path, {"id": "f", "step": "driver_before_complete", "epoch": 0, "action": "raise"}
    )
    first = world.sink(commit_protocol=protocol, on_bad_record="dead-letter")
    try:
        with inject_faults(faults):
            with pytest.raises(Exception, match="injected fault 'f'"):
                first(world.frame(), 0)
    finally:
        first.close()
    # The replay by a new sink object: two-phase rolled the prepared work back and writes it
    # again; the idempotency table's committed partitions are compared with their markers
    # (the checksum covers the classification; the server's rejections it cannot see).
    second = world.sink(commit_protocol=protocol, on_bad_record="dead-letter")
    try:
        result = second(world.frame(), 0)
        assert result.committed and not result.skipped
        [metrics] = second.metrics()
        if protocol == "two-phase":
            assert {r.outcome for r in result.reports} == {PartitionOutcome.PREPARED}
            assert metrics.dead_lettered == 2
        else:
            assert {r.outcome for r in result.reports} == {PartitionOutcome.ALREADY_COMMITTED}
            assert metrics.dead_lettered == 0
    finally:
        second.close()
    third = world.sink(commit_protocol=protocol, on_bad_record="dead-letter")
    try:
        assert third(world.frame(), 0).skipped
    finally:
        third.close()
    world.assert_table_exact()
    world.assert_dead_letters()


def test_skip_counts_the_bad_records_and_dead_letters_nothing(world: World) -> None:
    sink = world.sink(on_bad_record="skip")
    try:
        assert sink(world.frame(), 0).committed
        [metrics] = sink.metrics()
        assert (metrics.skipped_records, metrics.dead_lettered, metrics.rows) == (2, 0, N)
    finally:
        sink.close()
    world.assert_table_exact()
    table = world.pg.execute("SELECT to_regclass(%s)", (f"{world.schema}.dead_letters",)).fetchone()
    assert table == (None,)


@pytest.mark.parametrize("protocol", ["two-phase", "idempotency-table"])
def test_beyond_max_bad_fraction_the_epoch_aborts_with_nothing_visible(
    world: World, protocol: str
) -> None:
    # One bad record in each write partition of about N / 2 rows: more than 1% of either.
    sink = world.sink(
        commit_protocol=protocol,
        on_bad_record="dead-letter",
        max_bad_fraction=0.01,
        stage_retries=0,
    )
    try:
        with pytest.raises(
            StageError,
            match="max_bad_fraction=0.01",
            check=lambda e: e.code is StageCode.BAD_RECORD_THRESHOLD,
        ):
            sink(world.frame(), 0)
    finally:
        sink.close()
    count = world.pg.execute(
        sql.SQL("SELECT count(*) FROM {}.t").format(sql.Identifier(world.schema))
    ).fetchone()
    assert count == (0,)
    assert world.dead_letters() == []
    prepared = world.pg.execute(
        "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE %s", (f"%{world.schema}%",)
    ).fetchone()
    assert prepared == (0,)
