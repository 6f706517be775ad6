"""Unit tests of the table sinks without a table: options, records, errors, the choice rule."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

from connectors.lakehouse import DeltaSinkConfig, IcebergSinkConfig, LakehouseCode, LakehouseError
from connectors.lakehouse._changes import last_changes
from connectors.lakehouse._schema import check_layout
from connectors.lakehouse._staging import StagedFile, VoteRecord, choose
from connectors.lakehouse._table import EpochCommit
from connectors.stage import StageCode, StageError
from txn import CommitMode, ErrorAction, TxnCode, TxnError


def delta(**options: Any) -> DeltaSinkConfig:
    return DeltaSinkConfig.build(table_uri="/data/t", sink_id="s", **options)


def test_defaults_and_the_epoch_log_beside_the_table() -> None:
    cfg = delta()
    assert cfg.mode is CommitMode.UNALIGNED and cfg.write_mode == "append"
    assert cfg.epoch_log_path == "/data/t/_eos/s.epochlog"
    assert "storage_options" not in repr(delta(storage_options={"secret": "hunter2"}))
    iceberg = IcebergSinkConfig.build(
        table="db.t", sink_id="s", catalog_properties={"token": "hunter2"}
    )
    assert "hunter2" not in repr(iceberg)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"sink_id": "a b"}, "sink_id"),
        ({"guarantee": "at-least-once"}, "exactly-once only"),
        ({"parallelism": 0}, "parallelism"),
        ({"partition_by": "day"}, "partition_by"),
        ({"write_mode": "merge"}, "write_mode"),
        ({"write_mode": "upsert"}, "needs key_columns"),
        ({"key_columns": ["id"]}, "only apply"),
        ({"write_mode": "upsert", "key_columns": ["a-b"]}, "plain identifiers"),
        ({"storage_options": {"k": 1}}, "storage_options"),
        ({"colour": "red"}, "unknown DeltaSink option"),
    ],
)
def test_bad_options_are_named(options: dict[str, Any], named: str) -> None:
    base = {"table_uri": "/data/t", "sink_id": "s", **options}
    with pytest.raises(TxnError, match=named, check=lambda e: e.code is TxnCode.CONFIG):
        DeltaSinkConfig.build(**base)


def test_a_remote_table_needs_an_epoch_log_and_iceberg_refuses_upserts() -> None:
    with pytest.raises(TxnError, match="epoch_log", check=lambda e: e.code is TxnCode.CONFIG):
        DeltaSinkConfig.build(table_uri="s3://bucket/t", sink_id="s")
    assert DeltaSinkConfig.build(table_uri="s3://b/t", sink_id="s", epoch_log="/l").epoch_log
    with pytest.raises(TxnError, match="appends only", check=lambda e: e.code is TxnCode.CONFIG):
        IcebergSinkConfig.build(table="db.t", sink_id="s", write_mode="upsert", key_columns=["k"])
    with pytest.raises(TxnError, match="namespace.table", check=lambda e: e.code is TxnCode.CONFIG):
        IcebergSinkConfig.build(table="t", sink_id="s")


def test_the_fingerprint_covers_what_decides_where_rows_land() -> None:
    base = delta().fingerprint()
    assert delta().fingerprint() == base
    changed = [
        delta(partition_by=["day"]),
        delta(order_by=["seq"]),
        delta(write_mode="upsert", key_columns=["id"]),
        DeltaSinkConfig.build(table_uri="/data/u", sink_id="s"),
    ]
    assert all(c.fingerprint() != base for c in changed)
    assert delta(parallelism=4).fingerprint() == base  # a new plan may change it


def test_what_crosses_a_process_boundary_pickles() -> None:
    record = VoteRecord(
        epoch=3, attempt=1, partition=2, token="t", prepared=True, rows=5, checksum="c",
        files=(StagedFile(path="a.parquet", size=10, rows=5, detail={"stats": "{}"}),),
    )  # fmt: skip
    for thing in (
        delta(),
        record,
        EpochCommit(app="s", epoch=3, attempt=1, summaries={0: (5, "c")}),
    ):
        assert pickle.loads(pickle.dumps(thing)) == thing
    assert VoteRecord.from_json(record.to_json()) == record
    error = pickle.loads(pickle.dumps(LakehouseError("x", code=LakehouseCode.COMMIT_FAILED)))
    assert isinstance(error, TxnError) and error.code is LakehouseCode.COMMIT_FAILED
    assert error.action is ErrorAction.ABORT and error.retry_stage


def test_the_commit_metadata_round_trips() -> None:
    commit = EpochCommit(app="s", epoch=7, attempt=2, summaries={0: (3, "u01"), 1: (0, "u00")})
    assert EpochCommit.parse(commit.metadata()) == commit
    with_input = EpochCommit(
        app="s", epoch=7, attempt=2, summaries={}, input_end={("in", 0): 40, ("in", 1): 7}
    )
    assert EpochCommit.parse(with_input.metadata()) == with_input
    assert EpochCommit.parse({"operation": "WRITE"}) is None


def test_one_prepared_record_per_partition_the_smallest_token() -> None:
    def rec(partition: int, token: str, *, attempt: int = 0, prepared: bool = True) -> VoteRecord:
        return VoteRecord(
            epoch=1, attempt=attempt, partition=partition, token=token, prepared=prepared
        )

    chosen = choose(
        [rec(0, "b"), rec(0, "a"), rec(1, "c", prepared=False), rec(1, "d", attempt=1)],
        attempt=0,
        parallelism=2,
    )
    assert {p: r.token for p, r in chosen.items()} == {0: "a"}  # partition 1: none prepared


def test_the_input_check_names_the_column_and_the_fix() -> None:
    table = pa.schema([("id", pa.int64()), ("v", pa.string())])
    ok = check_layout(pa.schema([("id", pa.int64())]), table, what="T")
    assert ok.schema.names == ["id"]  # a missing nullable column is written as null
    with pytest.raises(
        StageError, match="cast it", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        check_layout(pa.schema([("id", pa.string())]), table, what="T")
    assert info.value.column == "id"
    with pytest.raises(
        StageError, match="evolve_schema=True", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ):
        check_layout(pa.schema([("x", pa.int64())]), table, what="T")
    grown = check_layout(pa.schema([("x", pa.int64())]), table, what="T", evolve_schema=True)
    assert grown.added == ("x",)
    zoned = pa.schema([("ts", pa.timestamp("us", tz="Europe/Paris"))])
    made = check_layout(zoned, None, what="T", create_table=True)
    assert made.create and made.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    with pytest.raises(
        StageError, match="partition by", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ):
        check_layout(zoned, None, what="T", create_table=True, partition_by=["ts"])


def test_the_last_change_of_each_key_and_bad_changes() -> None:
    rows = pa.table({"k": [1, 2, 1, 3, 2], "v": ["a", "b", "c", "d", "e"]})
    assert last_changes(rows, ("k",), None).to_pylist() == [
        {"k": 1, "v": "c"},
        {"k": 3, "v": "d"},
        {"k": 2, "v": "e"},
    ]
    with pytest.raises(StageError, match="null", check=lambda e: e.code is StageCode.RECORD):
        last_changes(pa.table({"k": [1, None]}), ("k",), None)
    with pytest.raises(StageError, match="op column", check=lambda e: e.code is StageCode.RECORD):
        last_changes(pa.table({"k": [1], "op": ["upsert"]}), ("k",), "op")
