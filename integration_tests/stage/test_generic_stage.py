"""A connector from a Resource, a Participant and a schema check only, driven through Spark.

The in-memory participants of ``txn.testing`` (both kinds: commit-in-task like Kafka,
coordinator-completable like PostgreSQL) write into a store served to Spark's Python
workers; ``connectors.stage.TransactionalSink`` supplies everything else (routing,
checksums, the barrier stage and votes, stage retries, recovery). Each test checks that
every input row is committed exactly once and that nothing is left open or prepared.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.stage import (
    ArrowPartition,
    InputSpec,
    SimpleConnector,
    StageCode,
    StageError,
    StageOptions,
    TransactionalSink,
)
from txn import CommitMode, EpochState
from txn.testing import CommitInTaskResource, MemoryStore, PreparedResource, serve_store

pytestmark = pytest.mark.spark

ROWS = 60
KINDS = {"commit-in-task": CommitInTaskResource, "prepared": PreparedResource}


def decode(rows: ArrowPartition) -> list[str]:
    """The participants' view of a write task's rows: the values, in a stable order."""
    return sorted(v for batch in rows.batches() for v in batch.column("value").to_pylist())


def check_input(schema: Any) -> InputSpec:
    """The connector's schema check: one string column ``value``."""
    names = {f.name: f.dataType.simpleString() for f in schema.fields}
    if names.get("value") != "string":
        msg = "the DataFrame needs a string column 'value'"
        raise StageError(msg, column="value", code=StageCode.INPUT_SCHEMA)
    return InputSpec(columns=("value",))


@pytest.fixture
def served() -> Iterator[tuple[MemoryStore, Any]]:
    with serve_store() as pair:
        yield pair


def batch(spark: Any, epoch: int) -> Any:
    return spark.range(epoch * ROWS, (epoch + 1) * ROWS, numPartitions=3).selectExpr(
        "concat('r', id) AS value"
    )


def make_sink(
    tmp_path: Path, handle: Any, kind: str, mode: CommitMode, **opts: Any
) -> TransactionalSink:
    resource = KINDS[kind](handle, decode=decode)
    options = StageOptions(mode=mode, parallelism=2, **opts)
    connector = SimpleConnector(
        f"gen-{uuid.uuid4().hex[:8]}", resource, check_input, tmp_path / "epochs.log", options
    )
    return TransactionalSink(connector)


def assert_exactly_once(store: MemoryStore, epochs: int) -> None:
    committed = store.rows_by_epoch()
    for epoch in range(epochs):
        assert Counter(committed.get(epoch, [])) == Counter(
            f"r{i}" for i in range(epoch * ROWS, (epoch + 1) * ROWS)
        ), f"epoch {epoch}"
    assert store.dangling() == []


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("mode", [CommitMode.ALIGNED, CommitMode.UNALIGNED], ids=lambda m: m.value)
def test_epochs_commit_exactly_once_and_a_replay_is_skipped(
    spark, tmp_path, served, kind, mode, closing
):
    store, handle = served
    sink = closing(make_sink(tmp_path, handle, kind, mode))
    for epoch in range(3):
        result = sink(batch(spark, epoch), epoch)
        assert result.committed and not result.skipped
    assert sink(batch(spark, 2), 2).skipped  # Spark replays the last batch after a restart
    assert_exactly_once(store, 3)
    assert sink.epoch_log_history().state(2) is EpochState.COMMITTED
    sink.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_failed_write_is_re_run_by_the_stage_and_lands_once(spark, tmp_path, served, kind, closing):
    store, handle = served
    sink = closing(make_sink(tmp_path, handle, kind, CommitMode.ALIGNED, stage_retries=0))
    sink(batch(spark, 0), 0)
    store.fail_write(1, 1)
    with pytest.raises(Exception, match="injected write failure"):
        sink(batch(spark, 1), 1)
    assert store.dangling() == []  # aligned: nobody committed, the open work was aborted
    store.heal_write(1, 1)
    sink(batch(spark, 1), 1)  # the replay redoes the epoch
    assert_exactly_once(store, 2)
    sink.close()


def test_new_sink_object_recovers_an_epoch_left_in_doubt(spark, tmp_path, served, closing):
    store, handle = served
    sink = closing(make_sink(tmp_path, handle, "prepared", CommitMode.ALIGNED, stage_retries=0))
    store.fail_write(0, 0)
    with pytest.raises(Exception, match="injected write failure"):
        sink(batch(spark, 0), 0)
    sink.close()
    store.heal_write(0, 0)
    again = closing(TransactionalSink(sink.connector))  # a restarted driver, same log and store
    assert again(batch(spark, 0), 0).committed
    assert_exactly_once(store, 1)
    again.close()


def test_bad_input_is_refused_before_anything_is_logged(spark, tmp_path, served, closing):
    store, handle = served
    sink = closing(make_sink(tmp_path, handle, "commit-in-task", CommitMode.ALIGNED))
    with pytest.raises(StageError, check=lambda e: e.code is StageCode.INPUT_SCHEMA) as info:
        sink(spark.range(3), 0)
    assert info.value.column == "value"
    assert store.commits == [] and not (tmp_path / "epochs.log").exists()


def _freeze_counts(batches: Iterator[Any]) -> Iterator[Any]:
    import gc

    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"frozen": [gc.get_freeze_count()]})


def test_write_tasks_leave_their_python_worker_heap_frozen(spark, tmp_path, served, closing):
    # PySpark collects a reused worker's whole heap after every task; the kit's tasks
    # freeze the worker's long-lived objects once (connectors._worker_heap), so that walk
    # stays small. The workers that ran the write tasks serve the next job's tasks.
    store, handle = served
    sink = closing(make_sink(tmp_path, handle, "commit-in-task", CommitMode.UNALIGNED))
    assert sink(batch(spark, 0), 0).committed
    probe = spark.range(2, numPartitions=2).mapInArrow(_freeze_counts, "frozen long")
    assert max(r.frozen for r in probe.collect()) > 10_000
    assert_exactly_once(store, 1)
