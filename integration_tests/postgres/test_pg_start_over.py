"""``start_over=True`` on a PostgreSQL sink and on a composite, through real streaming queries.

A first query writes 0, 1 or several epochs; the checkpoint is then replaced (a new
query, batch ids from 0 again): with ``start_over=True`` the new query's batches are new
epochs above the old ones, and a restart of the new query from its checkpoint (with a new
sink object) continues them. Every input row must be in the output exactly once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import KafkaSink
from connectors.postgres import PostgresSink
from connectors.stage import CompositeSink, TransactionalSink
from integration_tests.kafka_sink._support import lso_reaches_high_watermark, read_committed
from integration_tests.postgres._queries import (
    create_table,
    file_rows,
    prepared_left,
    run,
    stage_files,
    table_rows,
    table_sink,
)

pytestmark = pytest.mark.spark

PROTOCOLS = ["two-phase", "idempotency-table"]
FIRST_EPOCHS = [0, 1, 4]


def start_over_scenario(spark: Any, tmp: Path, epochs: int, make: Any) -> TransactionalSink:
    """Query A writes ``epochs`` files; query B (new checkpoint, start over) 2, then 1 more.

    Returns the last sink object (closed); ``make(**options)`` builds a sink of one id.
    """
    a, b = tmp / "in-a", tmp / "in-b"
    stage_files(a, 0, epochs)
    a.mkdir(exist_ok=True)
    with make() as first:
        run(spark, a, tmp / "ck-a", first)
    stage_files(b, 100, 2)
    with make(start_over=True) as second:
        run(spark, b, tmp / "ck-b", second)
    stage_files(b, 102, 1)
    with make(start_over=True) as restarted:  # same checkpoint: same query, same binding
        run(spark, b, tmp / "ck-b", restarted)
        history = restarted.epoch_log_history()
    assert history.binding is not None and history.binding.epoch_offset == epochs
    assert history.last_committed_epoch() == epochs + 2 and not history.unfinished()
    return restarted


def expected_rows(epochs: int) -> Counter[tuple[int, str]]:
    return file_rows(range(epochs), range(100, 103))


@pytest.mark.parametrize("epochs", FIRST_EPOCHS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_postgres_sink_starts_over_after_a_new_checkpoint(
    spark: Any,
    pg: Any,
    schema: str,
    postgres_dsn: str,
    tmp_path: Path,
    protocol: str,
    epochs: int,
    closing: Callable[[PostgresSink], PostgresSink],
) -> None:
    create_table(pg, schema)

    def make(**options: Any) -> PostgresSink:
        return closing(table_sink(postgres_dsn, schema, commit_protocol=protocol, **options))

    start_over_scenario(spark, tmp_path, epochs, make)
    assert table_rows(pg, schema) == expected_rows(epochs)
    assert prepared_left(pg) == 0


def test_a_new_checkpoint_without_start_over_is_refused_and_writes_nothing(
    spark: Any,
    pg: Any,
    schema: str,
    postgres_dsn: str,
    tmp_path: Path,
    closing: Callable[[PostgresSink], PostgresSink],
) -> None:
    create_table(pg, schema)

    def make(**options: Any) -> PostgresSink:
        return closing(table_sink(postgres_dsn, schema, **options))

    stage_files(tmp_path / "in", 0, 2)
    with make() as first:
        run(spark, tmp_path / "in", tmp_path / "ck-a", first)
    with make() as again, pytest.raises(Exception, match="query-mismatch"):
        run(spark, tmp_path / "in", tmp_path / "ck-b", again)
    assert table_rows(pg, schema) == file_rows(range(2))


def to_kafka(df: Any) -> Any:
    return df.selectExpr("CAST(id AS STRING) AS key", "v AS value")


def to_table(df: Any) -> Any:
    return df.select("id", "v")


@pytest.mark.parametrize(
    ("epochs", "first"),
    [(0, "kafka"), (1, "kafka"), (4, "kafka"), (4, "postgres")],
    ids=["0-kafka-log", "1-kafka-log", "4-kafka-log", "4-postgres-log"],
)
def test_composite_starts_over_after_a_new_checkpoint(
    spark: Any,
    pg: Any,
    schema: str,
    postgres_dsn: str,
    kafka_bootstrap: str,
    new_topic: Any,
    tmp_path: Path,
    epochs: int,
    first: str,
    closing: Callable[[CompositeSink], CompositeSink],
) -> None:
    """The composite's epoch log is its first member's kind (the Kafka topic or the table)."""
    create_table(pg, schema)
    topic, sink_id = new_topic("so", 2), f"so-{uuid.uuid4().hex[:8]}"

    def make(**options: Any) -> CompositeSink:
        # One write task each: aligned mode runs both members' tasks at once on local[2].
        kafka = (KafkaSink(kafka_bootstrap, topic, f"{sink_id}-k", parallelism=1), to_kafka)
        table = (
            PostgresSink(
                postgres_dsn,
                "t",
                f"{sink_id}-p",
                schema=schema,
                control_schema=schema,
                parallelism=1,
            ),
            to_table,
        )
        members = [kafka, table] if first == "kafka" else [table, kafka]
        return closing(CompositeSink(members, sink_id=sink_id, **options))

    start_over_scenario(spark, tmp_path, epochs, make)
    rows = expected_rows(epochs)
    assert table_rows(pg, schema) == rows
    in_topic = Counter(r.value for r in read_committed(kafka_bootstrap, topic))
    assert in_topic == Counter(v.encode() for (_, v), n in rows.items() for _ in range(n))
    assert prepared_left(pg) == 0
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)
