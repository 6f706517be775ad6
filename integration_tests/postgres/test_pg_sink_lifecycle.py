"""A PostgresSink lets go of its epoch log, so a notebook can run its query cell again.

In one Python process: a query with sink A, stopped (or ended); the same query again with a
new sink object B of the same ``sink_id`` must take over and continue exactly once. While
A's query still runs, B is refused with ``StageCode.SINK_IN_USE``, which says so and what to do.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import KafkaSink
from connectors.postgres import PostgresEpochLog, PostgresSink
from connectors.stage import CompositeSink, StageCode, StageError
from integration_tests.postgres._queries import (
    PER_FILE,
    create_table,
    file_rows,
    prepared_left,
    run,
    stage_files,
    start,
    table_rows,
    table_sink,
    wait_until,
)

pytestmark = pytest.mark.spark

Make = Callable[..., PostgresSink]


@pytest.fixture
def make(pg: Any, schema: str, postgres_dsn: str) -> Make:
    create_table(pg, schema)

    def new(**options: Any) -> PostgresSink:
        return table_sink(postgres_dsn, schema, **options)

    return new


def log_is_free(sink: PostgresSink) -> bool:
    """Whether another coordinator can open the sink's epoch log now (its lock is free)."""
    try:
        PostgresEpochLog(sink.config).close()
    except StageError as exc:  # pragma: no cover - the log's own lock error is not this one
        if exc.code is StageCode.SINK_IN_USE:
            raise
        return False
    except Exception:  # noqa: BLE001 - TxnCode.EPOCH_LOG_LOCKED: the lock is held
        return False
    return True


def written(pg: Any, schema: str, files: int) -> bool:
    return sum(table_rows(pg, schema).values()) >= files * PER_FILE


@pytest.mark.parametrize("how", ["ended", "stop", "stop_gracefully"])
def test_a_new_sink_object_takes_over_once_the_query_stopped(
    spark: Any,
    pg: Any,
    schema: str,
    make: Make,
    tmp_path: Path,
    how: str,
    closing: Callable[[PostgresSink], PostgresSink],
) -> None:
    source, ck = tmp_path / "in", tmp_path / "ck"
    stage_files(source, 0, 2)
    a = closing(make())  # the notebook keeps it: not collected, not closed (until the end)
    if how == "ended":
        run(spark, source, ck, a)
    else:
        query = start(spark, source, ck, a, available_now=False)
        wait_until("two batches written", lambda: written(pg, schema, 2))
        if how == "stop":
            query.stop()
        else:
            assert a.stop_gracefully(query)
            assert log_is_free(a), "stop_gracefully released the epoch log's lock"
    stage_files(source, 2, 1)
    with make() as b:  # the cell run again: a new sink object, the same sink_id
        run(spark, source, ck, b)
        history = b.epoch_log_history()
    assert log_is_free(b)
    assert history.last_committed_epoch() == 2 and not history.unfinished()
    assert table_rows(pg, schema) == file_rows(range(3))
    assert prepared_left(pg) == 0
    a.close()
    a.close()  # idempotent, also after B took the log over


def test_a_new_query_with_a_new_sink_object_takes_over_once_the_old_query_stopped(
    spark: Any,
    pg: Any,
    schema: str,
    make: Make,
    tmp_path: Path,
    closing: Callable[[PostgresSink], PostgresSink],
) -> None:
    stage_files(tmp_path / "in", 0, 1)
    a = closing(make())
    query = start(spark, tmp_path / "in", tmp_path / "ck", a, available_now=False)
    wait_until("a batch written", lambda: written(pg, schema, 1))
    query.stop()
    stage_files(tmp_path / "in-b", 10, 2)
    with make(start_over=True) as b:  # another query (a new checkpoint), the same sink_id
        run(spark, tmp_path / "in-b", tmp_path / "ck-b", b)
    assert table_rows(pg, schema) == file_rows(range(1), range(10, 12))
    a.close()


def test_a_new_sink_object_is_refused_while_the_first_query_runs(
    spark: Any,
    pg: Any,
    schema: str,
    make: Make,
    tmp_path: Path,
    closing: Callable[[PostgresSink], PostgresSink],
) -> None:
    source = tmp_path / "in"
    stage_files(source, 0, 1)
    a = closing(make())
    first = start(spark, source, tmp_path / "ck", a, available_now=False)
    try:
        wait_until("a batch written", lambda: written(pg, schema, 1))
        b = closing(make())
        stage_files(tmp_path / "in-b", 50, 1)
        second = start(spark, tmp_path / "in-b", tmp_path / "ck-b", b, available_now=False)
        with pytest.raises(Exception, match="sink-in-use") as info:
            second.awaitTermination(120)
        text = str(info.value)
        assert f"its query {first.id} is still active" in text
        assert "query.stop()" in text and "another sink_id" in text
        assert first.isActive, "the running query is left alone"
        stage_files(source, 1, 1)
        wait_until("the first query's next batch", lambda: written(pg, schema, 2))
    finally:
        first.stop()
    stage_files(source, 2, 1)
    with b:  # the refused object works once the first query stopped
        run(spark, source, tmp_path / "ck", b)
    assert table_rows(pg, schema) == file_rows(range(3))
    assert prepared_left(pg) == 0


def test_sink_objects_called_directly_hand_the_log_back_and_forth(
    spark: Any, pg: Any, schema: str, make: Make
) -> None:
    def batch(n: int) -> Any:
        return spark.range(n * PER_FILE, (n + 1) * PER_FILE, numPartitions=2).selectExpr(
            "id", "concat('v', id) AS v"
        )

    a, b = make(), make()
    try:
        assert a(batch(0), 0).committed
        assert b(batch(1), 1).committed  # a is idle and in no query: b takes over
        assert a(batch(1), 1).skipped  # and back: a recovers, sees epoch 1 committed
        assert a(batch(2), 2).committed
    finally:
        a.close()
        b.close()
    assert table_rows(pg, schema) == file_rows(range(3))


def coordinator_sessions(pg: Any, sink_id: str) -> int:
    """The sink's driver sessions still open (the epoch log's, the commits' connection)."""
    row = pg.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
        (f"eos {sink_id} coordinator"[:63],),
    ).fetchone()
    return int(row[0]) if row else 0


def test_with_block_close_and_collection_release_the_log_and_connections(
    spark: Any, pg: Any, schema: str, make: Make
) -> None:
    df = spark.range(0, PER_FILE, numPartitions=2).selectExpr("id", "concat('v', id) AS v")
    sink_id = f"{schema}-s"
    with make() as sink:
        sink(df, 0)
        assert not log_is_free(sink) and coordinator_sessions(pg, sink_id) >= 1
    assert log_is_free(sink)
    wait_until("the driver's sessions closed", lambda: coordinator_sessions(pg, sink_id) == 0, 30)
    sink.close()  # idempotent
    sink.close()
    collected = make()
    collected(
        spark.range(PER_FILE, 2 * PER_FILE, numPartitions=2).selectExpr(
            "id", "concat('v', id) AS v"
        ),
        1,
    )
    config = collected.config
    del collected
    gc.collect()
    probe = PostgresEpochLog(config)  # no TxnCode.EPOCH_LOG_LOCKED: the lock went with it
    probe.close()
    wait_until("the driver's sessions closed", lambda: coordinator_sessions(pg, sink_id) == 0, 30)
    assert table_rows(pg, schema) == file_rows(range(2))


def test_closing_a_composite_closes_its_member_sinks(
    spark: Any,
    pg: Any,
    schema: str,
    make: Make,
    kafka_bootstrap: str,
    new_topic: Any,
    tmp_path: Path,
    closing: Callable[[KafkaSink], KafkaSink],
) -> None:
    df = spark.range(0, PER_FILE, numPartitions=2).selectExpr("id", "concat('v', id) AS v")
    table = make()
    table(df, 0)  # used on its own first: it holds its own epoch log
    kafka = closing(KafkaSink(kafka_bootstrap, new_topic("life", 1), f"{schema}-k", parallelism=1))
    with CompositeSink(
        [
            (kafka, lambda d: d.selectExpr("CAST(id AS STRING) AS value")),
            (table, lambda d: d.select("id", "v")),
        ],
        sink_id=f"{schema}-both",
        epoch_log=tmp_path / "both.log",
        mode="unaligned",
    ) as both:
        # Epoch 1: the member's markers (its sink_id's) already hold its own epoch 0.
        later = spark.range(PER_FILE, 2 * PER_FILE, numPartitions=2).selectExpr(
            "id", "concat('v', id) AS v"
        )
        assert both(later, 1).committed
        assert not log_is_free(table)
    assert log_is_free(table)
    assert table_rows(pg, schema) == file_rows(range(2))
