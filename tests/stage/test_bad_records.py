"""The bad-record layer of the stage: options, the screened partition, dead-letter, skip, threshold."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from connectors.stage import (
    ArrowPartition,
    BadRow,
    CompositeSink,
    DeadLetterContext,
    SimpleConnector,
    StageCode,
    StageError,
    StageOptions,
    TransactionalSink,
)
from connectors.stage._bad_records import ERROR_CLASS_COLUMN, bad_batch, drop_rows, screened
from connectors.stage._rows import HASH_COLUMN
from txn import Marker, Participant, RowSummary, TxnCode, TxnError


class NullValues:
    """Test classifier: a null ``value`` is bad."""

    def classify(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, list[BadRow]]:
        value = batch.column(batch.schema.get_field_index("value"))
        bad = [
            BadRow(i, "NullValue", "null value")
            for i, v in enumerate(value.to_pylist())
            if v is None
        ]
        return drop_rows(batch, [b.index for b in bad]), bad


class Recorder(Participant[ArrowPartition]):
    """Test double of a connector's participant: keeps what it was asked to write."""

    def __init__(self) -> None:
        self.written: list[Any] = []
        self.dead: list[tuple[list[pa.RecordBatch], DeadLetterContext]] = []

    def committed_marker(self) -> Marker | None:
        return None

    def summarize(self, rows: ArrowPartition) -> RowSummary:
        return rows.summary()

    def begin(self, epoch: int) -> None:
        pass

    def write(self, rows: ArrowPartition) -> RowSummary:
        for batch in rows.batches():
            self.written += batch.column(batch.schema.get_field_index("value")).to_pylist()
        return rows.summary()

    def write_dead_letters(self, records: Sequence[pa.RecordBatch], ctx: DeadLetterContext) -> None:
        self.dead.append((list(records), ctx))

    def pre_commit(self, summary: RowSummary) -> None:
        pass

    def commit(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def batch(values: list[str | None]) -> pa.RecordBatch:
    hashes = [hash(("row", i, v)) & 0x7FFFFFFFFFFFFFFF for i, v in enumerate(values)]
    return pa.record_batch(
        [pa.array(values, pa.string()), pa.array(hashes, pa.int64())], names=["value", HASH_COLUMN]
    )


CTX = DeadLetterContext(sink_id="s", epoch=7, partition=1)


def run(
    policy: str, values: list[str | None], **options: Any
) -> tuple[Recorder, ArrowPartition, RowSummary]:
    inner = Recorder()
    participant = screened(inner, NullValues(), StageOptions(on_bad_record=policy, **options), CTX)
    rows = ArrowPartition([batch(values)], batch_id=42)
    return inner, rows, participant.write(rows)


def test_options_are_validated_at_construction() -> None:
    with pytest.raises(
        TxnError, match="on_bad_record must be one of", check=lambda e: e.code is TxnCode.CONFIG
    ):
        StageOptions(on_bad_record="drop")
    with pytest.raises(TxnError, match="from 0 to 1", check=lambda e: e.code is TxnCode.CONFIG):
        StageOptions(on_bad_record="skip", max_bad_fraction=1.5)
    with pytest.raises(
        TxnError, match="only applies with", check=lambda e: e.code is TxnCode.CONFIG
    ):
        StageOptions(max_bad_fraction=0.1)
    assert StageOptions(on_bad_record="skip", max_bad_fraction=0).max_bad_fraction == 0.0
    assert not StageOptions().screens_records


def test_a_connector_that_does_not_classify_refuses_the_policies(tmp_path: Any) -> None:
    def check(schema: Any) -> Any:
        raise AssertionError

    connector = SimpleConnector(
        "s",
        Recorder(),
        check,
        tmp_path / "log",
        StageOptions(on_bad_record="skip"),  # type: ignore[arg-type]
    )
    with pytest.raises(
        TxnError, match="cannot classify bad records", check=lambda e: e.code is TxnCode.CONFIG
    ):
        TransactionalSink(connector)
    member = TransactionalSink(SimpleConnector("m", Recorder(), check, tmp_path / "m"))  # type: ignore[arg-type]
    with pytest.raises(
        TxnError, match="member sink's option", check=lambda e: e.code is TxnCode.CONFIG
    ):
        CompositeSink([member], sink_id="c", on_bad_record="dead-letter")


def test_fail_policy_leaves_the_participant_alone() -> None:
    inner = Recorder()
    assert screened(inner, NullValues(), StageOptions(), CTX) is inner


def test_dead_letter_writes_good_rows_and_hands_over_exactly_the_bad_ones() -> None:
    inner, rows, summary = run("dead-letter", ["a", None, "b", None])
    assert inner.written == ["a", "b"]
    [(records, ctx)] = inner.dead
    assert ctx == DeadLetterContext(sink_id="s", epoch=7, partition=1, batch_id=42)
    [record] = records
    assert record.column(record.schema.get_field_index("value")).to_pylist() == [None, None]
    assert (
        record.column(record.schema.get_field_index(ERROR_CLASS_COLUMN)).to_pylist()
        == ["NullValue"] * 2
    )
    assert (rows.dead_lettered, rows.skipped) == (2, 0)
    assert summary.rows == 2
    assert "+b2." in summary.checksum


def test_the_classification_is_in_the_checksum_and_a_replay_compares_equal() -> None:
    _, _, written = run("dead-letter", ["a", None, "b"])
    participant = screened(Recorder(), NullValues(), StageOptions(on_bad_record="skip"), CTX)
    assert participant.summarize(ArrowPartition([batch(["a", None, "b"])])) == written
    plain = ArrowPartition([batch(["a", "x", "b"])]).summary()
    _, _, clean = run("skip", ["a", "x", "b"])
    assert clean == plain  # no bad record: the checksum of the rows, unchanged
    other = ArrowPartition([batch(["a", None, "b"])]).summary()
    assert written.checksum.startswith(other.checksum) and written.checksum != other.checksum


def test_skip_counts_and_logs_each_record_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "connectors.stage.bad_records")
    inner, rows, summary = run("skip", [None, "a", None])
    assert inner.written == ["a"] and inner.dead == []
    assert (rows.dead_lettered, rows.skipped, summary.rows) == (0, 2, 1)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("skipped a bad record (NullValue: null value)" in line for line in lines) == 2
    assert any("skipped 2 bad record(s)" in line and "2 x NullValue" in line for line in lines)


def test_threshold_aborts_with_a_typed_error_and_allows_up_to_the_limit() -> None:
    with pytest.raises(
        StageError,
        match="2 of 4 rows are bad",
        check=lambda e: e.code is StageCode.BAD_RECORD_THRESHOLD,
    ) as err:
        run("dead-letter", ["a", None, None, "b"], max_bad_fraction=0.25)
    assert err.value.retry_stage is False
    assert pickle.loads(pickle.dumps(err.value)).args == err.value.args
    inner, rows, _ = run("dead-letter", ["a", None, "b", "c"], max_bad_fraction=0.25)
    assert rows.dead_lettered == 1


def test_an_empty_partition_and_a_partition_of_only_bad_rows() -> None:
    inner, rows, summary = run("skip", [])
    assert (inner.written, summary.rows, rows.skipped) == ([], 0, 0)
    inner, rows, summary = run("dead-letter", [None])
    assert (inner.written, summary.rows, rows.dead_lettered) == ([], 0, 1)


def test_context_pickles() -> None:
    ctx = DeadLetterContext(sink_id="s", epoch=1, partition=2, batch_id=3)
    assert pickle.loads(pickle.dumps(ctx)) == ctx


class Rejecting(Recorder):
    """Test double of a participant whose server rejects the value ``"reject"`` while writing."""

    def __init__(self) -> None:
        super().__init__()
        self.rejected: list[pa.RecordBatch] = []
        self.marked: RowSummary | None = None

    def write(self, rows: ArrowPartition) -> RowSummary:
        for b in rows.batches():
            values = b.column(b.schema.get_field_index("value")).to_pylist()
            bad = [
                BadRow(i, "Rejected", "the server says no")
                for i, v in enumerate(values)
                if v == "reject"
            ]
            self.written += [v for v in values if v != "reject"]
            if bad:
                self.rejected.append(bad_batch(b, bad))
        return rows.summary()

    def rejected_records(self) -> list[pa.RecordBatch]:
        return self.rejected

    def pre_commit(self, summary: RowSummary) -> None:
        self.marked = summary


def test_the_marker_of_a_partition_with_server_rejections_is_what_a_replay_recounts() -> None:
    values = ["a", None, "reject", "b"]
    inner = Rejecting()
    participant = screened(inner, NullValues(), StageOptions(on_bad_record="dead-letter"), CTX)
    rows = ArrowPartition([batch(values)], batch_id=42)
    task = participant.write(rows)
    participant.pre_commit(task)
    assert inner.written == ["a", "b"] and rows.dead_lettered == 2
    assert task.rows == 2  # the good rows: the task's (and the epoch's) count
    # A replay of the committed partition only compares: it cannot see the server's
    # rejection, so the marker must hold what summarize() recounts (3 rows got through
    # the classifier), with the same checksum.
    again = screened(Rejecting(), NullValues(), StageOptions(on_bad_record="dead-letter"), CTX)
    replay = again.summarize(ArrowPartition([batch(values)], batch_id=42))
    assert inner.marked == replay == RowSummary(3, task.checksum)
