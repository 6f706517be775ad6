"""Arrow batches to COPY CSV data, the merge statements and the gid scheme (no server)."""

from __future__ import annotations

import csv
import io

import pyarrow as pa
import pytest
from psycopg import sql

from connectors.postgres import PostgresCode, PostgresSinkError, WriteMode
from connectors.postgres._encode import encode_batch, hex_bytea
from connectors.postgres._schema import TableLayout
from connectors.postgres._twophase import Gid, gid_prefix, parse_gid
from connectors.postgres._writer import merge_statement
from connectors.stage import StageCode
from connectors.stage._rows import HASH_COLUMN


def layout(mode: WriteMode = WriteMode.APPEND, **kw: object) -> TableLayout:
    base: dict[str, object] = {
        "schema": "public",
        "table": "t",
        "write_mode": mode,
        "columns": (("id", "bigint"), ("name", "text")),
        "arrow_types": ("int64", "string"),
    }
    if mode is not WriteMode.APPEND:
        base |= {"keys": ("id",), "update_columns": ("name",)}
    if mode is WriteMode.CHANGELOG:
        base["op_column"] = "op"
    return TableLayout(**(base | kw))  # type: ignore[arg-type]


def batch(
    ids: list[int | None], names: list[str | None], ops: list[str] | None = None
) -> pa.RecordBatch:
    cols = {"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string())}
    if ops is not None:
        cols["op"] = pa.array(ops)
    cols[HASH_COLUMN] = pa.array([7] * len(ids), pa.int64())
    return pa.record_batch(cols)


def rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode())))


def test_append_csv_keeps_null_empty_quotes_and_newlines_apart() -> None:
    data, n = encode_batch(
        batch([1, 2, 3, None], ["plain", "", 'say "hi",\nbye', None]), layout(), 0
    )
    assert n == 4
    assert data.decode().splitlines()[:2] == ['1,"plain"', '2,""']
    assert rows(data)[2] == ["3", 'say "hi",\nbye']
    assert data.decode().endswith(",\n")  # id NULL: unquoted empty field, name NULL too
    assert b"7" not in data  # the hash column is not written


def test_upsert_numbers_rows_from_the_running_offset() -> None:
    data, n = encode_batch(batch([5, 6], ["a", "b"]), layout(WriteMode.UPSERT), 10)
    assert n == 2 and rows(data) == [["5", "a", "10"], ["6", "b", "11"]]


def test_changelog_drops_update_before_and_appends_the_op() -> None:
    data, n = encode_batch(
        batch(
            [1, 1, 1, 2],
            ["old", "new", None, "x"],
            ["insert", "update_before", "update_after", "delete"],
        ),
        layout(WriteMode.CHANGELOG),
        0,
    )
    assert n == 3
    assert rows(data) == [
        ["1", "old", "0", "insert"],
        ["1", "", "1", "update_after"],
        ["2", "x", "2", "delete"],
    ]


def test_unknown_op_and_null_keys_are_record_errors() -> None:
    with pytest.raises(
        PostgresSinkError, match="'upsert'", check=lambda e: e.code is StageCode.RECORD
    ) as info:
        encode_batch(batch([1], ["a"], ["upsert"]), layout(WriteMode.CHANGELOG), 0)
    assert info.value.column == "op"
    with pytest.raises(
        PostgresSinkError, match="null in 1 row", check=lambda e: e.code is StageCode.RECORD
    ) as info:
        encode_batch(batch([1, None], ["a", "b"]), layout(WriteMode.UPSERT), 0)
    assert info.value.column == "id"


def test_too_long_values_are_refused_before_sending() -> None:
    limited = layout(
        columns=(("id", "bigint"), ("name", "character varying(3)")), max_chars=(("name", 3),)
    )
    encode_batch(batch([1], ["äöü"]), limited, 0)  # characters, not bytes
    with pytest.raises(
        PostgresSinkError,
        match="4 characters.*allows 3",
        check=lambda e: e.code is PostgresCode.VALUE_TOO_LARGE,
    ) as info:
        encode_batch(batch([1], ["abcd"]), limited, 0)
    assert info.value.column == "name"


def test_a_batch_of_another_schema_is_refused() -> None:
    other = pa.record_batch(
        {
            "id": pa.array([1], pa.int32()),
            "name": pa.array(["a"]),
            HASH_COLUMN: pa.array([1], pa.int64()),
        }
    )
    with pytest.raises(
        PostgresSinkError, match="schema changed", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ):
        encode_batch(other, layout(), 0)


def test_bytea_hex_including_nulls_empty_and_slices() -> None:
    values = pa.array([b"\x00\xff", None, b"", b"AB"], pa.binary())
    assert hex_bytea(values).to_pylist() == ["\\x00ff", None, "\\x", "\\x4142"]
    assert hex_bytea(values.slice(1, 3)).to_pylist() == [None, "\\x", "\\x4142"]
    assert hex_bytea(pa.array([b"\x01"], pa.large_binary())).to_pylist() == ["\\x01"]


def test_merge_statements() -> None:
    stage = sql.Identifier("stage")
    upsert = merge_statement(layout(WriteMode.UPSERT), stage).as_string(None)
    assert upsert == (
        'INSERT INTO "public"."t" ("id", "name") SELECT "id", "name" FROM (SELECT DISTINCT ON '
        '("id") "id", "name" FROM "stage" ORDER BY "id", "_eos_seq" DESC) s ON CONFLICT ("id") '
        'DO UPDATE SET "name" = EXCLUDED."name"'
    )
    keys_only = layout(
        WriteMode.UPSERT, columns=(("id", "bigint"),), arrow_types=("int64",), update_columns=()
    )
    assert merge_statement(keys_only, stage).as_string(None).endswith("DO NOTHING")
    changelog = merge_statement(layout(WriteMode.CHANGELOG), stage).as_string(None)
    assert changelog.startswith('WITH last AS (SELECT DISTINCT ON ("id") "id", "name", "_eos_op"')
    assert 'DELETE FROM "public"."t" t USING last s WHERE s."_eos_op" = \'delete\'' in changelog
    assert 'WHERE "_eos_op" <> \'delete\' ON CONFLICT ("id")' in changelog


def test_gid_round_trip_and_foreign_gids() -> None:
    gid = Gid(sink_id="orders-eos.v2_x", epoch=12, attempt=3, partition=7)
    assert str(gid) == "eos:orders-eos.v2_x:12:3:7" and parse_gid(str(gid)) == gid
    assert str(gid).startswith(gid_prefix("orders-eos.v2_x"))
    longest = Gid(sink_id="s" * 64, epoch=2**63 - 1, attempt=2**31, partition=2**31)
    assert len(str(longest).encode()) < 200  # PostgreSQL's limit for a transaction id
    for foreign in [
        "xa:1:2",
        "eos:s:1:2",
        "eos:s:1:2:x",
        "eos::1:2:3",
        "eos:s:01:2:3",
        "eos:s:-1:2:3",
        "other:s:1:2:3",
    ]:
        assert parse_gid(foreign) is None, foreign
