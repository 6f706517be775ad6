"""One epoch across Kafka and PostgreSQL (``CompositeSink``), through real Spark.

Invariants checked after every step: the table never shows an epoch the topic does not
fully hold; once recovered, both hold exactly the same epochs, every row once; nothing of
the sinks is left open (no prepared transaction, the last stable offset at the high
watermark).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from connectors.kafka import KafkaSink
from connectors.postgres import PostgresSink
from connectors.stage import CompositeSink, StageCode, StageError
from connectors.testing import FaultPlan, inject_faults
from integration_tests.kafka_sink._support import (
    lso_reaches_high_watermark,
    read_committed,
    values,
)
from txn import CommitMode
from txn._model import PartitionOutcome

pytestmark = pytest.mark.spark

ROWS = 60


def batch(spark: Any, epoch: int) -> Any:
    return spark.range(epoch * ROWS, (epoch + 1) * ROWS, numPartitions=3).selectExpr(
        "id", "concat('v', id) AS v"
    )


def to_kafka(df: Any) -> Any:
    return df.selectExpr("CAST(id AS STRING) AS key", "v AS value")


def to_table(df: Any) -> Any:
    return df.select("id", "v")


class World:
    """A topic and a table written together, and the checks of the invariants."""

    def __init__(
        self, spark: Any, kafka: str, topic: str, dsn: str, pg: Any, schema: str, tmp: Path
    ) -> None:
        self.spark, self.kafka, self.topic, self.dsn, self.pg = spark, kafka, topic, dsn, pg
        self.schema, self.tmp = schema, tmp
        self.sink_id = f"mix-{uuid.uuid4().hex[:8]}"
        pg.execute(
            sql.SQL("CREATE TABLE {}.t (id bigint PRIMARY KEY, v text)").format(
                sql.Identifier(schema)
            )
        )

    def sink(self, table_select: Any = to_table, **options: Any) -> CompositeSink:
        # One write task each: aligned mode runs both members' tasks at once on local[2].
        kafka = KafkaSink(self.kafka, self.topic, f"{self.sink_id}-k", parallelism=1)
        table = PostgresSink(
            self.dsn,
            "t",
            f"{self.sink_id}-p",
            schema=self.schema,
            control_schema=self.schema,
            parallelism=1,
        )
        return CompositeSink(
            [(kafka, to_kafka), (table, table_select)],
            sink_id=self.sink_id,
            epoch_log=self.tmp / "epochs.log",
            **options,
        )

    def table_epochs(self) -> Counter[int]:
        rows = self.pg.execute(
            sql.SQL("SELECT id FROM {}.t").format(sql.Identifier(self.schema))
        ).fetchall()
        return Counter(int(r[0]) // ROWS for r in rows)

    def topic_epochs(self) -> Counter[int]:
        return Counter(
            int(v.decode()[1:]) // ROWS for v in values(read_committed(self.kafka, self.topic))
        )

    def check_table_never_ahead(self) -> None:
        topic = self.topic_epochs()
        for epoch, n in self.table_epochs().items():
            assert n == ROWS, f"the table shows part of epoch {epoch}"
            assert topic[epoch] >= ROWS, f"the table shows epoch {epoch}, the topic lacks it"

    def check_exactly(self, epochs: int) -> None:
        assert self.table_epochs() == Counter({e: ROWS for e in range(epochs)})
        assert self.topic_epochs() == Counter({e: ROWS for e in range(epochs)})
        prepared = self.pg.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
        assert prepared is not None and prepared[0] == 0
        assert lso_reaches_high_watermark(self.kafka, self.topic)


@pytest.fixture
def world(spark, kafka_bootstrap, new_topic, postgres_dsn, pg, schema, tmp_path) -> World:
    return World(spark, kafka_bootstrap, new_topic("mix", 2), postgres_dsn, pg, schema, tmp_path)


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
def test_epochs_land_in_both_exactly_once(world: World, mode: CommitMode) -> None:
    sink = world.sink(mode=mode)
    try:
        for epoch in range(3):
            result = sink(batch(world.spark, epoch), epoch)
            assert result.committed
            outcomes = [r.outcome for r in result.reports]
            assert outcomes == [PartitionOutcome.COMMITTED, PartitionOutcome.PREPARED]
            world.check_table_never_ahead()
        assert sink(batch(world.spark, 2), 2).skipped
        assert sink.epoch_log_history().decision(2) is not None  # one decision for both
    finally:
        sink.close()
    world.check_exactly(3)


def test_a_select_by_column_names_and_the_rows_of_each_member(world: World) -> None:
    sink = world.sink(table_select=["id", "v"])
    try:
        for epoch in range(2):
            assert sink(batch(world.spark, epoch), epoch).committed
        metrics = sink.metrics()[-1]
    finally:
        sink.close()
    world.check_exactly(2)
    # a 60-row batch written to the topic and to the table: 60 rows each, not 120
    assert metrics.member_rows == {f"{world.sink_id}-k": ROWS, f"{world.sink_id}-p": ROWS}
    assert (metrics.rows, metrics.rows_written) == (ROWS, 2 * ROWS)


@pytest.mark.parametrize("mode", list(CommitMode), ids=lambda m: m.value)
def test_failed_table_write_keeps_the_table_behind_and_the_replay_completes(
    world: World, mode: CommitMode, tmp_path: Path
) -> None:
    plan = tmp_path / "faults.json"
    plan.write_text(
        json.dumps(
            [
                {
                    "id": "pg",
                    "step": "after_pre_commit",
                    "epoch": 1,
                    "partition": 1,
                    "action": "raise",
                    "times": 1,
                }
            ]
        )
    )
    sink = world.sink(mode=mode, stage_retries=0)
    try:
        with inject_faults(FaultPlan(str(plan))):
            sink(batch(world.spark, 0), 0)
            with pytest.raises(Exception, match="injected fault"):
                sink(batch(world.spark, 1), 1)
            world.check_table_never_ahead()
            assert world.table_epochs()[1] == 0
            if mode is CommitMode.ALIGNED:
                assert world.topic_epochs()[1] == 0  # one no vote: nobody committed
            assert sink(batch(world.spark, 1), 1).committed  # the replay completes both sides
    finally:
        sink.close()
    world.check_exactly(2)


def test_driver_dying_after_the_topic_committed_recovers_the_table(
    world: World, tmp_path: Path
) -> None:
    plan = tmp_path / "faults.json"
    plan.write_text(
        json.dumps(
            [
                {
                    "id": "d",
                    "step": "driver_before_complete",
                    "epoch": 1,
                    "action": "raise",
                    "times": 1,
                }
            ]
        )
    )
    sink = world.sink()
    try:
        with inject_faults(FaultPlan(str(plan))):
            sink(batch(world.spark, 0), 0)
            with pytest.raises(Exception, match="injected fault"):
                sink(batch(world.spark, 1), 1)  # every task committed / prepared; no decision
    finally:
        sink.close()
    assert world.topic_epochs()[1] == ROWS and world.table_epochs()[1] == 0
    world.check_table_never_ahead()
    restarted = world.sink()  # a new driver: recovery rolls the table back, the replay
    try:  # skips the topic's committed partitions and commits the table
        result = restarted(batch(world.spark, 1), 1)
        assert result.reports[0].outcome is PartitionOutcome.ALREADY_COMMITTED
    finally:
        restarted.close()
    world.check_exactly(2)


def test_default_options_fit_local_2(world: World) -> None:
    """No parallelism anywhere: the members share local[2]'s two slots, aligned."""
    kafka = KafkaSink(world.kafka, world.topic, f"{world.sink_id}-k")
    table = PostgresSink(
        world.dsn, "t", f"{world.sink_id}-p", schema=world.schema, control_schema=world.schema
    )
    sink = CompositeSink([(kafka, to_kafka), (table, to_table)], sink_id=world.sink_id)
    try:
        for epoch in range(2):
            result = sink(batch(world.spark, epoch), epoch)
            assert result.committed and result.plan is not None
            assert (result.plan.parallelism, result.plan.mode) == (2, CommitMode.ALIGNED)
            outcomes = [r.outcome for r in result.reports]
            assert outcomes == [PartitionOutcome.COMMITTED, PartitionOutcome.PREPARED]
    finally:
        sink.close()
    world.check_exactly(2)


def test_an_explicit_parallelism_that_does_not_fit_names_the_member(world: World) -> None:
    kafka = KafkaSink(world.kafka, world.topic, f"{world.sink_id}-k", parallelism=2)
    table = PostgresSink(
        world.dsn, "t", f"{world.sink_id}-p", schema=world.schema, control_schema=world.schema
    )
    sink = CompositeSink(
        [(kafka, to_kafka), (table, to_table)],
        sink_id=world.sink_id,
        epoch_log=world.tmp / "epochs.log",
    )
    try:
        with pytest.raises(
            StageError, check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS
        ) as caught:
            sink(batch(world.spark, 0), 0)
        assert f"lower '{world.sink_id}-k''s parallelism by 1 (to 1)" in str(caught.value)
        assert sink.epoch_log_history().plan(0) is None  # refused before the plan
    finally:
        sink.close()
    assert world.table_epochs() == Counter() and world.topic_epochs() == Counter()


def test_more_members_than_slots_run_unaligned_without_a_mode(world: World, new_topic: Any) -> None:
    """Three members on two slots (as two on a one-core application): unaligned, logged."""
    second = new_topic("mix2", 1)
    members = [
        (KafkaSink(world.kafka, world.topic, f"{world.sink_id}-k"), to_kafka),
        (
            PostgresSink(
                world.dsn,
                "t",
                f"{world.sink_id}-p",
                schema=world.schema,
                control_schema=world.schema,
            ),
            to_table,
        ),
        (KafkaSink(world.kafka, second, f"{world.sink_id}-j"), to_kafka),
    ]
    sink = CompositeSink(members, sink_id=world.sink_id, epoch_log=world.tmp / "epochs.log")
    try:
        for epoch in range(2):
            result = sink(batch(world.spark, epoch), epoch)
            assert result.committed and result.plan is not None
            assert (result.plan.parallelism, result.plan.mode) == (3, CommitMode.UNALIGNED)
    finally:
        sink.close()
    world.check_exactly(2)
    assert sum(values(read_committed(world.kafka, second)).values()) == 2 * ROWS
