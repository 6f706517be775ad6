"""The SQLite example through real Spark (local[2]) as a ``foreachBatch`` sink.

What users do every day, each checked against the table, the markers and the epoch log:
batches of many rows, of none and of one row, the same batch id again, a new sink object in
the same process; a streaming query stopped and started again from its checkpoint with a
new sink object; a Python worker killed while it holds SQLite's write lock, and right after
its commit; bad input refused before anything is logged.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.examples.sqlite import SqliteCode, SqliteSink, SqliteSinkError, read_markers
from connectors.stage import StageCode, StageError
from connectors.testing import FaultPlan, inject_faults
from txn import EpochState

pytestmark = pytest.mark.spark

PARALLELISM = 2


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, item TEXT, qty REAL, paid INTEGER)")
    return path


def rows(db: Path) -> Counter[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return Counter(conn.execute("SELECT id, item, qty, paid FROM orders"))


def batch(spark: Any, first: int, count: int, partitions: int = 3) -> Any:
    return spark.range(first, first + count, numPartitions=partitions).selectExpr(
        "id", "concat('item-', id) AS item", "CAST(id AS DOUBLE) / 2 AS qty", "id % 2 = 0 AS paid"
    )


def expected(first: int, count: int) -> Counter[tuple[Any, ...]]:
    return Counter((i, f"item-{i}", i / 2, int(i % 2 == 0)) for i in range(first, first + count))


def test_ordinary_batches_land_exactly_once(
    spark: Any, db: Path, closing: Callable[[SqliteSink], SqliteSink]
) -> None:
    sink = closing(SqliteSink(db, "orders", sink_id="orders", parallelism=PARALLELISM))
    want: Counter[tuple[Any, ...]] = Counter()
    for batch_id, (first, count) in enumerate([(0, 5000), (5000, 0), (5000, 1), (5001, 300)]):
        result = sink(batch(spark, first, count), batch_id)
        assert result.committed and not result.skipped, (batch_id, result)
        want += expected(first, count)
        assert rows(db) == want, f"after batch {batch_id} of {count} rows"
    markers = read_markers(sink.config, PARALLELISM)
    assert {p: m.epoch for p, m in markers.items()} == dict.fromkeys(range(PARALLELISM), 3)
    assert sum(m.rows for m in markers.values()) == 300

    assert sink(batch(spark, 5001, 300), 3).skipped  # Spark replays its last batch
    assert rows(db) == want
    sink.close()

    # A new sink object in the same process.
    again = closing(SqliteSink(db, "orders", sink_id="orders", parallelism=PARALLELISM))
    assert again(batch(spark, 5001, 300), 3).skipped
    assert again(batch(spark, 6000, 10), 4).committed
    want += expected(6000, 10)
    assert rows(db) == want
    history = again.epoch_log_history()
    assert [history.state(e) for e in range(5)] == [EpochState.COMMITTED] * 5
    assert history.in_doubt() == []
    again.close()


def test_an_empty_input_after_a_filter_commits(
    spark: Any, db: Path, closing: Callable[[SqliteSink], SqliteSink]
) -> None:
    sink = closing(SqliteSink(db, "orders", sink_id="filtered", parallelism=PARALLELISM))
    assert sink(batch(spark, 0, 100).where("id < 0"), 0).committed
    assert sink(batch(spark, 0, 100).where("id < 1"), 1).committed  # one row, one partition
    assert rows(db) == expected(0, 1)
    sink.close()


def test_a_streaming_query_restarts_from_its_checkpoint_with_a_new_sink(
    spark: Any, db: Path, tmp_path: Path, closing: Callable[[SqliteSink], SqliteSink]
) -> None:
    source = tmp_path / "in"
    source.mkdir()
    checkpoint = str(tmp_path / "checkpoint")

    def add_file(name: str, ids: range) -> None:
        lines = [
            json.dumps({"id": i, "item": f"item-{i}", "qty": i / 2, "paid": i % 2 == 0})
            for i in ids
        ]
        (source / name).write_text("".join(line + "\n" for line in lines))

    def run_query() -> list[EpochState]:
        sink = closing(SqliteSink(db, "orders", sink_id="stream", parallelism=PARALLELISM))
        stream = (
            spark.readStream.schema("id LONG, item STRING, qty DOUBLE, paid BOOLEAN")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        query = (
            stream.writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        history = sink.epoch_log_history()
        sink.close()
        return [history.state(e) for e in history.epochs()]

    add_file("a.json", range(0, 2000))
    add_file("b.json", range(0))  # an empty file: an empty micro-batch
    assert run_query() == [EpochState.COMMITTED] * 2  # the empty file was a batch of its own
    assert rows(db) == expected(0, 2000)
    add_file("c.json", range(2000, 2001))
    # a new query and sink object from the same checkpoint, in this process
    assert run_query() == [EpochState.COMMITTED] * 3
    assert rows(db) == expected(0, 2001)


@pytest.mark.parametrize(("step", "after_rows"), [("mid_write", 100), ("after_commit", None)])
def test_a_python_worker_killed_mid_write_or_after_its_commit(
    spark: Any,
    db: Path,
    tmp_path: Path,
    step: str,
    after_rows: int | None,
    closing: Callable[[SqliteSink], SqliteSink],
) -> None:
    """SIGKILL a write task: mid-write it holds the write lock with rows inserted (SQLite
    rolls them back from its journal when the next writer opens the file); after its commit
    the re-run finds its marker. The stage re-runs the failed write stage in the same call."""
    fault: dict[str, Any] = {
        "id": "k",
        "step": step,
        "epoch": 1,
        "partition": 1,
        "action": "kill",
        "times": 1,
    }
    if after_rows is not None:
        fault["after_rows"] = after_rows
    plan = tmp_path / "faults.json"
    plan.write_text(json.dumps([fault]))
    sink = closing(
        SqliteSink(
            db,
            "orders",
            sink_id=f"kill-{step}",
            parallelism=PARALLELISM,
        )
    )
    with inject_faults(FaultPlan(str(plan))):
        assert sink(batch(spark, 0, 1000), 0).committed
        assert sink(batch(spark, 1000, 1000), 1).committed
    assert FaultPlan(str(plan)).has_fired("k"), "the worker was never killed: proves nothing"
    assert rows(db) == expected(0, 2000)
    markers = read_markers(sink.config, PARALLELISM)
    assert {p: m.epoch for p, m in markers.items()} == dict.fromkeys(range(PARALLELISM), 1)
    sink.close()


def test_bad_input_is_refused_before_anything_is_logged(
    spark: Any, db: Path, closing: Callable[[SqliteSink], SqliteSink]
) -> None:
    sink = closing(SqliteSink(db, "orders", sink_id="bad", parallelism=PARALLELISM))
    with pytest.raises(
        StageError, match="'colour'", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        sink(batch(spark, 0, 3).selectExpr("id", "'red' AS colour"), 0)
    assert info.value.column == "colour"
    with pytest.raises(
        StageError, match="timestamp", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        sink(batch(spark, 0, 3).selectExpr("id", "current_timestamp() AS item"), 0)
    assert info.value.column == "item"
    assert rows(db) == Counter()
    assert not Path(sink.config.epoch_log_path).exists()
    missing = closing(SqliteSink(db.with_name("none.db"), "orders", sink_id="none"))
    with pytest.raises(
        SqliteSinkError,
        match="does not exist",
        check=lambda e: e.code is SqliteCode.TABLE_NOT_FOUND,
    ):
        missing(batch(spark, 0, 3), 0)
    assert not db.with_name("none.db").exists()


def test_the_guides_runnable_blocks_run(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/writing-a-db-connector.md's ``<!-- run -->`` blocks, as a reader runs them."""
    guide = Path(__file__).resolve().parents[2] / "docs" / "writing-a-db-connector.md"
    blocks = re.findall(r"<!-- run -->\n```python\n(.*?)```", guide.read_text(), re.S)
    assert blocks, "the guide lost its runnable example"
    monkeypatch.chdir(tmp_path)  # the blocks use relative paths, as a reader would
    for index, code in enumerate(blocks):
        exec(compile(code, f"{guide.name}[run {index}]", "exec"), {"spark": spark})
    assert (tmp_path / "orders.db").exists()
