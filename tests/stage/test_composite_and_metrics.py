"""Unit tests: a composite sink's member ``select`` checked at construction, rows per member
in the epoch metrics, and the listener's names of sources."""

from __future__ import annotations

import pickle

import pytest

from connectors.kafka import KafkaSink
from connectors.stage import CompositeSink
from connectors.stage._composite import SelectColumns
from connectors.stage._listener import source_name
from connectors.stage._metrics import EpochRecorder
from txn import EpochPlan, EpochResult, PartitionReport, TxnCode, TxnError
from txn._model import PartitionOutcome


def member(name: str) -> KafkaSink:
    return KafkaSink("127.0.0.1:9", "out", name, epoch_log=None)  # no I/O at construction


@pytest.mark.parametrize("select", [5, "id", [], ["id", 3], [""], {"id": 1}])
def test_a_select_that_is_neither_a_function_nor_column_names_fails_at_construction(
    select: object,
) -> None:
    with pytest.raises(
        TxnError,
        match="select of member 'm-k' must be a function",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        CompositeSink([(member("m-k"), select)], sink_id="m")  # type: ignore[list-item]


def test_a_pair_must_have_two_parts() -> None:
    with pytest.raises(
        TxnError,
        match="sink or a \\(sink, select\\) pair",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        CompositeSink([(member("m-k"), None, None)], sink_id="m")  # type: ignore[list-item]


def test_column_names_become_a_picklable_projection() -> None:
    sinks = CompositeSink(
        [(member("m-k"), ["key", "value"]), (member("m-j"), lambda df: df)], sink_id="m"
    )
    select = sinks._members[0].select
    assert select == SelectColumns(("key", "value"))
    assert pickle.loads(pickle.dumps(select)) == select

    class Frame:
        def select(self, *names: str) -> tuple[str, ...]:
            return names

    assert select(Frame()) == ("key", "value")


def test_metrics_count_rows_per_member_not_once_per_member() -> None:
    plan = EpochPlan(sink_id="m", epoch=3, parallelism=4, fingerprint="fp")
    recorder = EpochRecorder(sink_id="m", batch_id=3, query_id=None)
    recorder.add_member(0, "m-k", 0, 2)
    recorder.add_member(1, "m-p", 2, 2)
    reports = (
        PartitionReport(epoch=3, partition=0, outcome=PartitionOutcome.COMMITTED, rows=2600),
        PartitionReport(epoch=3, partition=1, outcome=PartitionOutcome.COMMITTED, rows=2400),
        PartitionReport(epoch=3, partition=2, outcome=PartitionOutcome.PREPARED, rows=2500),
        PartitionReport(epoch=3, partition=3, outcome=PartitionOutcome.PREPARED, rows=2500),
    )
    metrics = recorder.finish(
        EpochResult(epoch=3, plan=plan, skipped=False, committed=True, reports=reports), appends=3
    )
    assert metrics.member_rows == {"m-k": 5000, "m-p": 5000}
    assert (metrics.rows, metrics.rows_written) == (5000, 10000)
    assert pickle.loads(pickle.dumps(metrics)) == metrics


def test_members_with_the_same_sink_id_are_told_apart() -> None:
    recorder = EpochRecorder(sink_id="m", batch_id=0, query_id=None)
    recorder.add_member(0, "x", 0, 1)
    recorder.add_member(1, "x", 1, 1)
    assert [m.name for m in recorder.members.values()] == ["x", "x#1"]


def test_metrics_of_a_single_sink_and_of_a_failed_epoch() -> None:
    plan = EpochPlan(sink_id="s", epoch=0, parallelism=2, fingerprint="fp")
    one = EpochRecorder(sink_id="s", batch_id=0, query_id=None)
    one.add_member(0, "s", 0, 2)
    one.add_member(0, "s", 0, 2)  # a second plan attempt notes the same share again
    reports = (
        PartitionReport(epoch=0, partition=0, outcome=PartitionOutcome.COMMITTED, rows=3),
        PartitionReport(epoch=0, partition=1, outcome=PartitionOutcome.ALREADY_COMMITTED, rows=4),
    )
    metrics = one.finish(
        EpochResult(epoch=0, plan=plan, skipped=False, committed=True, reports=reports), appends=2
    )
    assert (metrics.rows, metrics.rows_written, metrics.member_rows) == (3, 3, {"s": 3})
    failed = EpochRecorder(sink_id="s", batch_id=1, query_id=None).finish(
        None, 0, RuntimeError("boom")
    )
    assert (failed.rows, failed.rows_written, failed.member_rows) == (0, 0, {})


@pytest.mark.parametrize(
    ("description", "offsets", "name"),
    [
        (
            "org.apache.spark.sql.execution.datasources.v2.python."
            "PythonMicroBatchStreamWithTriggerAvailableNow@26c52cc1",
            ('{"orders":{"0":5}}', '{"orders":{"0":9},"refunds":{"0":1}}'),
            "PythonMicroBatchStreamWithTriggerAvailableNow[orders,refunds]",
        ),
        ("org.example.MyStream@1f", ('{"a": 1}', None), "MyStream"),
        ("org.example.MyStream@1f", (None, "not json"), "MyStream"),
        ("KafkaV2[Subscribe[orders]]", ('{"orders":{"0":5}}',), "KafkaV2[Subscribe[orders]]"),
        ("FileStreamSource[file:/tmp/in]", (), "FileStreamSource[file:/tmp/in]"),
    ],
)
def test_source_names(description: str, offsets: tuple[str | None, ...], name: str) -> None:
    assert source_name(description, *offsets) == name
