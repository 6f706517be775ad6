"""Empty epochs through real Spark, for every sink, protocol and mode (issue 17, hole 0).

An empty micro-batch is ordinary (a quiet input, a selective filter). Spark often runs no
task at all for it (the empty input is optimized away to no partitions); the stage then
runs every planned task over placeholder partitions, so each partition still prepares an
empty transaction and votes (docs/architecture.md, "Empty epochs"). Each test runs the
sequence a user's query produces and checks the output exactly after it:

rows, an empty batch, an input filtered to nothing, rows, one row (one write partition
empty), the same batch id again (skipped), rows again.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from connectors.kafka import KafkaSink
from connectors.postgres import PostgresSink
from connectors.stage import CompositeSink, TransactionalSink
from integration_tests.kafka_sink._support import (
    lso_reaches_high_watermark,
    read_committed,
    values,
)
from integration_tests.postgres._queries import table_sink
from txn import CommitMode, EpochState

pytestmark = pytest.mark.spark

MODES = [m.value for m in CommitMode]
PROTOCOLS = ["two-phase", "idempotency-table"]


def frames(spark: Any) -> list[tuple[str, Any, list[int]]]:
    """(what, batch, ids it holds) of the sequence in the module docstring."""
    return [
        ("rows", spark.range(0, 40, numPartitions=3), list(range(40))),
        ("empty", spark.range(0), []),
        ("empty, no partitions", spark.createDataFrame([], "id long"), []),
        ("filtered to nothing", spark.range(100, 140, numPartitions=3).filter("id < 0"), []),
        ("rows", spark.range(40, 80, numPartitions=2), list(range(40, 80))),
        ("one row", spark.range(80, 81), [80]),
    ]


def run_sequence(spark: Any, sink: TransactionalSink, shape: Callable[[Any], Any]) -> list[int]:
    """Run the sequence through ``sink``; return the ids that must be in the output once."""
    expected: list[int] = []
    batch_id = 0
    for what, df, ids in frames(spark):
        result = sink(shape(df), batch_id)
        assert result.committed and not result.skipped, what
        assert [r.partition for r in result.reports] == list(range(result.plan.parallelism))
        expected += ids
        batch_id += 1
    again = sink(shape(spark.range(80, 81)), batch_id - 1)  # the same batch id twice
    assert again.skipped and again.committed
    empty_again = sink(shape(spark.range(0)), 1)  # an empty batch replayed
    assert empty_again.skipped
    last = sink(shape(spark.range(81, 90, numPartitions=2)), batch_id)
    assert last.committed and not last.skipped
    history = sink.epoch_log_history()
    assert all(history.state(e) is EpochState.COMMITTED for e in range(batch_id + 1)), history
    return [*expected, *range(81, 90)]


# -- PostgreSQL --------------------------------------------------------------------------
def pg_ids(pg: Any, schema: str) -> Counter[int]:
    rows = pg.execute(sql.SQL("SELECT id FROM {}.t").format(sql.Identifier(schema))).fetchall()
    return Counter(int(r[0]) for r in rows)


def no_prepared(pg: Any) -> bool:
    row = pg.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
    return row is not None and row[0] == 0


def to_table(df: Any) -> Any:
    return df.selectExpr("id", "concat('v', id) AS v")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_postgres_sink_commits_empty_epochs(
    spark: Any, pg: Any, schema: str, postgres_dsn: str, protocol: str, mode: str
) -> None:
    pg.execute(
        sql.SQL("CREATE TABLE {}.t (id bigint PRIMARY KEY, v text)").format(sql.Identifier(schema))
    )
    sink = table_sink(postgres_dsn, schema, commit_protocol=protocol, mode=mode)
    try:
        expected = run_sequence(spark, sink, to_table)
    finally:
        sink.close()
    assert pg_ids(pg, schema) == Counter(expected)
    assert no_prepared(pg)


# -- Kafka ---------------------------------------------------------------------------------
def to_kafka(df: Any) -> Any:
    return df.selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")


def topic_ids(bootstrap: str, topic: str) -> Counter[int]:
    return Counter(int(v.decode()) for v in values(read_committed(bootstrap, topic)))


@pytest.mark.parametrize(
    ("mode", "keep"), [("aligned", False), ("unaligned", False), ("unaligned", True)]
)
def test_kafka_sink_commits_empty_epochs(
    spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], mode: str, keep: bool
) -> None:
    topic = new_topic("empty", 2)
    width: dict[str, Any] = {"keep_partitioning": True} if keep else {"parallelism": 2}
    sink = KafkaSink(kafka_bootstrap, topic, f"empty-{uuid.uuid4().hex[:8]}", mode=mode, **width)
    try:
        expected = run_sequence(spark, sink, to_kafka)
    finally:
        sink.close()
    assert topic_ids(kafka_bootstrap, topic) == Counter(expected)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


# -- both in one epoch ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_transactional_sinks_commit_empty_epochs(
    spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    pg: Any,
    schema: str,
    postgres_dsn: str,
    tmp_path: Path,
    mode: str,
) -> None:
    pg.execute(
        sql.SQL("CREATE TABLE {}.t (id bigint PRIMARY KEY, v text)").format(sql.Identifier(schema))
    )
    topic = new_topic("empty-mix", 2)
    name = f"mix-{uuid.uuid4().hex[:8]}"
    # One write task each: aligned mode runs both members' tasks at once on local[2].
    kafka = KafkaSink(kafka_bootstrap, topic, f"{name}-k", parallelism=1)
    table = PostgresSink(
        postgres_dsn,
        "t",
        f"{name}-p",
        schema=schema,
        control_schema=schema,
        parallelism=1,
        commit_protocol="two-phase",
    )
    sink = CompositeSink(
        [(kafka, to_kafka), (table, to_table)],
        sink_id=name,
        epoch_log=tmp_path / "epochs.log",
        mode=mode,
    )
    try:
        expected = run_sequence(spark, sink, lambda df: df)
    finally:
        sink.close()
    assert pg_ids(pg, schema) == Counter(expected)
    assert topic_ids(kafka_bootstrap, topic) == Counter(expected)
    assert no_prepared(pg)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


@pytest.mark.parametrize("mode", MODES)
def test_transactional_sinks_commit_when_one_member_gets_no_row(
    spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    pg: Any,
    schema: str,
    postgres_dsn: str,
    tmp_path: Path,
    mode: str,
) -> None:
    """The table's rows are filtered to nothing in batch 1: its job runs no task, the topic's
    tasks wait for its votes in the same round (aligned), and the epoch commits on both."""
    pg.execute(
        sql.SQL("CREATE TABLE {}.t (id bigint PRIMARY KEY, v text)").format(sql.Identifier(schema))
    )
    topic = new_topic("empty-member", 2)
    name = f"mix-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSink(kafka_bootstrap, topic, f"{name}-k", parallelism=1)
    table = PostgresSink(
        postgres_dsn,
        "t",
        f"{name}-p",
        schema=schema,
        control_schema=schema,
        parallelism=1,
        commit_protocol="two-phase",
    )
    small = lambda df: to_table(df.filter("id < 1000"))  # a select function
    sink = CompositeSink(
        [(kafka, to_kafka), (table, small)],
        sink_id=name,
        epoch_log=tmp_path / "epochs.log",
        mode=mode,
    )
    try:
        for batch_id, (start, end) in enumerate([(0, 10), (1000, 1010), (10, 20)]):
            result = sink(spark.range(start, end, numPartitions=2), batch_id)
            assert result.committed and not result.skipped
        assert sink(spark.range(1000, 1010, numPartitions=2), 1).skipped
    finally:
        sink.close()
    assert pg_ids(pg, schema) == Counter(range(20))
    assert topic_ids(kafka_bootstrap, topic) == Counter([*range(20), *range(1000, 1010)])
    assert no_prepared(pg)


# -- a failure at each step of an empty epoch, then the replay -------------------------------
STEPS = [
    "after_open",
    "after_pre_commit",
    "before_commit",
    "after_commit",
    "driver_after_stage",
    "driver_before_complete",
    "driver_after_decision",
]
SINKS = ["kafka", "two-phase", "idempotency-table"]


def _fires(kind: str, step: str) -> bool:
    """Whether ``step`` is reached by an epoch of ``kind`` (two-phase tasks never commit;
    only two-phase logs a decision)."""
    if step == "after_commit":
        return kind != "two-phase"
    if step == "driver_after_decision":
        return kind == "two-phase"
    return True


@pytest.mark.parametrize(("kind", "step"), [(k, s) for k in SINKS for s in STEPS if _fires(k, s)])
def test_a_failure_in_an_empty_epoch_is_replayed_exactly_once(
    spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    pg: Any,
    schema: str,
    postgres_dsn: str,
    tmp_path: Path,
    kind: str,
    step: str,
    closing: Callable[[TransactionalSink], TransactionalSink],
) -> None:
    import json

    from connectors.testing import FaultPlan, inject_faults

    faults = tmp_path / "faults.json"
    faults.write_text(
        json.dumps([{"id": "f", "step": step, "epoch": 1, "action": "raise", "times": 1}])
    )
    plan = FaultPlan(str(faults))
    topic = ""
    options: dict[str, Any] = {"parallelism": 2, "stage_retries": 0}

    def new_sink(**extra: Any) -> TransactionalSink:
        if kind == "kafka":
            return closing(KafkaSink(kafka_bootstrap, topic, f"{schema}-k", **options, **extra))
        return closing(table_sink(postgres_dsn, schema, commit_protocol=kind, **options, **extra))

    if kind == "kafka":
        topic = new_topic("empty-fail", 2)
        shape = to_kafka
    else:
        pg.execute(
            sql.SQL("CREATE TABLE {}.t (id bigint PRIMARY KEY, v text)").format(
                sql.Identifier(schema)
            )
        )
        shape = to_table
    sink = new_sink()
    try:
        with inject_faults(plan):
            assert sink(shape(spark.range(0, 20, numPartitions=2)), 0).committed
            with pytest.raises(Exception, match="injected fault"):
                sink(shape(spark.range(0)), 1)
            assert plan.has_fired("f")
    finally:
        sink.close()
    replay = new_sink()  # a restart: a new sink object, the same batch id
    try:
        result = replay(shape(spark.range(0)), 1)
        assert result.committed
        assert replay(shape(spark.range(20, 30, numPartitions=2)), 2).committed
        history = replay.epoch_log_history()
    finally:
        replay.close()
    assert all(history.is_committed(e) for e in range(3)), history
    if kind == "kafka":
        assert topic_ids(kafka_bootstrap, topic) == Counter(range(30))
        assert lso_reaches_high_watermark(kafka_bootstrap, topic)
    else:
        assert pg_ids(pg, schema) == Counter(range(30))
        assert no_prepared(pg)
