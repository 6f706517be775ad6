"""DeltaSink and IcebergSink through real Spark (local[2]) as ``foreachBatch`` sinks.

Each test runs for both formats, on the local file system (Delta) and a SQLite SQL catalog
(Iceberg), checked against what a reader of the table sees: batches of many rows, of none
and of one row, the same batch id again, a new sink object in the same process, a
partitioned table created from the stream, a stream that gains a column and one that
retypes one, a Python worker killed in the middle of its write, another writer committing
to the table between two epochs; and nothing left behind (every data file on storage is
named by the table's log, no vote record stays in the staging area).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.stage import StageCode, StageError, TransactionalSink
from connectors.testing import FaultPlan, inject_faults
from integration_tests.lakehouse._tables import FORMATS, Table
from txn import EpochState

pytestmark = pytest.mark.spark
pytest.importorskip("deltalake", reason="the table sinks' tests need the [delta] extra")
pytest.importorskip("pyiceberg", reason="the table sinks' tests need the [iceberg] extra")

PARALLELISM = 2
COLUMNS = ("id", "item", "qty", "day")


def batch(spark: Any, first: int, count: int) -> Any:
    return spark.range(first, first + count, numPartitions=3).selectExpr(
        "id",
        "concat('item-', id) AS item",
        "CAST(id AS DOUBLE) / 2 AS qty",
        "date_add(DATE'2024-01-01', CAST(id % 3 AS INT)) AS day",
    )


def expected(first: int, count: int) -> Counter[tuple[Any, ...]]:
    import datetime

    day = datetime.date(2024, 1, 1)
    return Counter(
        (i, f"item-{i}", i / 2, day + datetime.timedelta(days=i % 3))
        for i in range(first, first + count)
    )


@pytest.fixture(params=FORMATS)
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Table:
    return Table(request.param, tmp_path)


def assert_clean(table: Table, sink: TransactionalSink) -> None:
    assert table.unnamed_files() == set(), "data files no commit names"
    assert table.staged(sink) == [], "vote records left in the staging area"


def test_ordinary_batches_land_exactly_once(
    spark: Any, table: Table, closing: Callable[[TransactionalSink], TransactionalSink]
) -> None:
    sink = closing(
        table.sink("orders", parallelism=PARALLELISM, create_table=True, partition_by=["day"])
    )
    want: Counter[tuple[Any, ...]] = Counter()
    for batch_id, (first, count) in enumerate([(0, 5000), (5000, 0), (5000, 1), (5001, 300)]):
        result = sink(batch(spark, first, count), batch_id)
        assert result.committed and not result.skipped, (batch_id, result)
        want += expected(first, count)
        assert table.rows(*COLUMNS) == want, f"after batch {batch_id} of {count} rows"
    assert sink(batch(spark, 5001, 300), 3).skipped  # Spark replays its last batch
    assert table.rows(*COLUMNS) == want
    sink.close()

    again = closing(table.sink("orders", parallelism=PARALLELISM))  # a new sink object
    assert again(batch(spark, 5001, 300), 3).skipped
    assert again(batch(spark, 6000, 10), 4).committed
    want += expected(6000, 10)
    assert table.rows(*COLUMNS) == want
    history = again.epoch_log_history()
    assert [history.state(e) for e in range(5)] == [EpochState.COMMITTED] * 5
    assert_clean(table, again)


def test_a_stream_that_gains_a_column_and_one_that_retypes_it(
    spark: Any, table: Table, closing: Callable[[TransactionalSink], TransactionalSink]
) -> None:
    sink = closing(
        table.sink("evolving", parallelism=PARALLELISM, create_table=True, evolve_schema=True)
    )
    assert sink(batch(spark, 0, 100), 0).committed
    gained = batch(spark, 100, 100).selectExpr("*", "id * 10 AS score")
    assert sink(gained, 1).committed
    rows = table.rows("id", "score")
    assert rows == Counter((i, None) for i in range(100)) + Counter(
        (i, i * 10) for i in range(100, 200)
    )
    retyped = batch(spark, 200, 10).selectExpr("id", "item", "qty", "day", "'x' AS score")
    with pytest.raises(
        StageError, match="'score'.*cast it", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        sink(retyped, 2)
    assert info.value.column == "score"
    dropped = batch(spark, 200, 10).select("id", "item", "day")  # qty written as null
    assert sink(dropped, 2).committed
    assert table.rows("id", "qty")[(205, None)] == 1
    assert_clean(table, sink)


def test_bad_input_and_a_missing_table_are_refused_before_anything_is_logged(
    spark: Any,
    table: Table,
    tmp_path: Path,
    closing: Callable[[TransactionalSink], TransactionalSink],
) -> None:
    sink = closing(table.sink("missing", parallelism=PARALLELISM))
    with pytest.raises(
        StageError, match="does not exist", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ):
        sink(batch(spark, 0, 3), 0)
    import pyarrow as pa

    table.create(pa.schema([("id", pa.int64()), ("item", pa.string())]))
    strict = closing(table.sink("strict", parallelism=PARALLELISM))
    with pytest.raises(
        StageError,
        match="'qty'.*evolve_schema=True",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ) as info:
        strict(batch(spark, 0, 3), 0)
    assert info.value.column == "qty"
    assert table.rows("id") == Counter()


def test_a_python_worker_killed_mid_write(
    spark: Any,
    table: Table,
    tmp_path: Path,
    closing: Callable[[TransactionalSink], TransactionalSink],
) -> None:
    """SIGKILL a write task with a data file half written: the re-run writes the partition
    again under a new token; the dead attempt's file is named by its vote record and deleted."""
    plan = tmp_path / "faults.json"
    fault = {"id": "k", "step": "mid_write", "epoch": 1, "partition": 1, "action": "kill"}
    plan.write_text(json.dumps([{**fault, "after_rows": 100, "times": 1}]))
    sink = closing(table.sink("killed", parallelism=PARALLELISM, create_table=True))
    with inject_faults(FaultPlan(str(plan))):
        assert sink(batch(spark, 0, 1000), 0).committed
        assert sink(batch(spark, 1000, 1000), 1).committed
    assert FaultPlan(str(plan)).has_fired("k"), "the worker was never killed: proves nothing"
    assert table.rows(*COLUMNS) == expected(0, 2000)
    assert_clean(table, sink)


def test_another_writer_between_epochs_and_a_second_sink_id(
    spark: Any, table: Table, closing: Callable[[TransactionalSink], TransactionalSink]
) -> None:
    """Optimistic concurrency: an unrelated append and a second sink id commit to the table
    between the epochs of the first; every writer's rows are there once, each sink's epochs
    are its own."""
    first = closing(table.sink("first", parallelism=PARALLELISM, create_table=True))
    second = closing(table.sink("second", parallelism=PARALLELISM))
    assert first(batch(spark, 0, 100), 0).committed
    other = batch(spark, 10_000, 5).toPandas()
    import pyarrow as pa

    unrelated = pa.Table.from_pandas(other, preserve_index=False)
    if table.kind == "delta":
        from deltalake import write_deltalake

        write_deltalake(table.uri, unrelated, mode="append")
    else:
        iceberg = table.iceberg()
        iceberg.append(unrelated.cast(iceberg.schema().as_arrow()))
    assert second(batch(spark, 20_000, 50), 0).committed  # its own epoch 0
    assert first(batch(spark, 100, 100), 1).committed
    assert first(batch(spark, 100, 100), 1).skipped
    want = expected(0, 200) + expected(10_000, 5) + expected(20_000, 50)
    assert table.rows(*COLUMNS) == want
    assert_clean(table, first)
    assert_clean(table, second)


@pytest.mark.parametrize("mode", ["upsert", "changelog"])
def test_delta_upserts_and_changelogs_keep_the_last_change_of_each_key(
    spark: Any, tmp_path: Path, mode: str, closing: Callable[[TransactionalSink], TransactionalSink]
) -> None:
    """One merge per epoch: the last change of each key (by ``seq``) wins, a changelog's
    deletes remove their key, update_before rows are dropped; a replay is skipped."""
    table = Table("delta", tmp_path)
    extra = {"op_column": "op"} if mode == "changelog" else {}
    sink = closing(
        table.sink(
            f"keyed-{mode}",
            parallelism=PARALLELISM,
            create_table=True,
            write_mode=mode,
            key_columns=["k"],
            order_by=["seq"],
            **extra,
        )
    )
    want: dict[int, tuple[int, str]] = {}
    for epoch in range(3):
        # 40 changes of 10 keys per epoch; in a changelog every 7th change deletes its key.
        seqs = range(epoch * 40, (epoch + 1) * 40)
        changes = [(s % 10, s, "delete" if s % 7 == 6 else "update_after") for s in seqs]
        rows = [(k, s, f"v{s}", op) for k, s, op in changes]
        if mode == "changelog":
            rows.append((3, epoch * 40 + 39, "before", "update_before"))  # dropped
        df = spark.createDataFrame(rows, "k INT, seq LONG, v STRING, op STRING")
        batch_df = df if mode == "changelog" else df.drop("op")
        assert sink(batch_df, epoch).committed
        for k, s, op in changes:
            if mode == "changelog" and op == "delete":
                want.pop(k, None)
            else:
                want[k] = (s, f"v{s}")
        got = {k: (s, v) for (k, s, v) in table.rows("k", "seq", "v").elements()}
        assert got == want, f"after epoch {epoch}"
    assert sink(batch_df, 2).skipped
    assert_clean(table, sink)


def test_appends_without_the_routing_exchange(
    spark: Any, table: Table, closing: Callable[[TransactionalSink], TransactionalSink]
) -> None:
    """``keep_partitioning=True``: one write task per input partition, no shuffle; an append
    epoch commits whole, so the replay of a committed batch is skipped and nothing doubles."""
    sink = closing(table.sink("kept", keep_partitioning=True, create_table=True))
    first = sink(batch(spark, 0, 900), 0)
    assert first.committed and len(first.reports) == 3  # batch() has 3 input partitions
    assert sink(batch(spark, 900, 100), 1).committed
    assert sink(batch(spark, 900, 100), 1).skipped
    assert table.rows(*COLUMNS) == expected(0, 1000)
    assert_clean(table, sink)
