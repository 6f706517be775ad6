"""The input check: Arrow types against column types, and the layout (no server)."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from connectors.postgres import PostgresSinkConfig, PostgresSinkError, WriteMode
from connectors.postgres._schema import ColumnInfo, TableInfo, TableLayout, check_input
from connectors.postgres._types import check_column_type
from connectors.stage import StageCode

DSN = "host=127.0.0.1 port=1"


def col(
    name: str,
    base: str,
    sql: str | None = None,
    *,
    not_null: bool = False,
    default: bool = False,
    generated: bool = False,
    identity: bool = False,
    max_chars: int | None = None,
) -> ColumnInfo:
    return ColumnInfo(
        name=name,
        type_sql=sql or base,
        base_type=base,
        type_kind="b",
        not_null=not_null,
        has_default=default,
        generated=generated,
        identity_always=identity,
        max_chars=max_chars,
    )


TABLE = TableInfo(
    schema="public",
    name="orders",
    columns=(
        col("id", "int8", "bigint", not_null=True),
        col("name", "varchar", "character varying(5)", max_chars=5),
        col("amount", "numeric", "numeric(10,2)"),
        col("created", "timestamptz", "timestamp with time zone", not_null=True, default=True),
        col("total", "numeric", generated=True),
        col("seq", "int8", identity=True, not_null=True, default=True),
    ),
    primary_key=("id",),
    unique_keys=(frozenset({"id"}), frozenset({"name", "amount"})),
)


def cfg(**kwargs: object) -> PostgresSinkConfig:
    return PostgresSinkConfig.build(dsn=DSN, table="orders", sink_id="s", **kwargs)  # type: ignore[arg-type]


def schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in fields] + [pa.field("_eos_hash", pa.int64())])


@pytest.mark.parametrize(
    ("arrow", "base", "ok"),
    [
        (pa.int32(), "int4", True),
        (pa.int64(), "int4", False),
        (pa.int64(), "int8", True),
        (pa.int16(), "int2", True),
        (pa.int32(), "int2", False),
        (pa.uint32(), "int8", True),
        (pa.uint32(), "int4", False),
        (pa.int64(), "numeric", True),
        (pa.decimal128(10, 2), "numeric", True),
        (pa.float64(), "numeric", False),
        (pa.float32(), "float4", True),
        (pa.float64(), "float4", False),
        (pa.float64(), "float8", True),
        (pa.int32(), "float8", True),
        (pa.int64(), "float8", False),
        (pa.bool_(), "bool", True),
        (pa.string(), "bool", False),
        (pa.string(), "text", True),
        (pa.large_string(), "varchar", True),
        (pa.string(), "jsonb", True),
        (pa.string(), "uuid", True),
        (pa.string(), "interval", True),
        (pa.int64(), "text", False),
        (pa.string(), "int8", False),
        (pa.binary(), "bytea", True),
        (pa.string(), "bytea", False),
        (pa.date32(), "date", True),
        (pa.timestamp("us"), "date", False),
        (pa.timestamp("us"), "timestamp", True),
        (pa.timestamp("us", tz="UTC"), "timestamp", False),
        (pa.timestamp("us", tz="UTC"), "timestamptz", True),
        (pa.timestamp("us"), "timestamptz", False),
        (pa.time64("us"), "time", True),
        (pa.null(), "int4", True),
        (pa.list_(pa.int64()), "jsonb", False),
    ],
)
def test_type_rules(arrow: pa.DataType, base: str, ok: bool) -> None:
    if ok:
        check_column_type("c", arrow, base, base)
    else:
        with pytest.raises(
            PostgresSinkError, check=lambda e: e.code is StageCode.INPUT_SCHEMA
        ) as info:
            check_column_type("c", arrow, base, base)
        assert info.value.column == "c" and "'c'" in str(info.value)


def test_narrowing_names_the_spark_type_and_the_cast() -> None:
    with pytest.raises(
        PostgresSinkError,
        match=r"LongType .* integer; cast it in Spark .*'int'",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ):
        check_column_type("id", pa.int64(), "int4", "integer")


def test_append_layout_drops_the_hash_column_and_keeps_input_order() -> None:
    layout = check_input(
        schema(("name", pa.string()), ("id", pa.int64()), ("amount", pa.decimal128(10, 2))),
        TABLE,
        cfg(),
    )
    assert layout.column_names == ("name", "id", "amount")
    assert layout.columns[0] == ("name", "character varying(5)")
    assert layout.arrow_types == ("string", "int64", "decimal128(10, 2)")
    assert layout.max_chars == (("name", 5),) and layout.keys == ()
    assert pickle.loads(pickle.dumps(layout)) == layout


def test_upsert_uses_the_primary_key_or_a_unique_key() -> None:
    s = schema(("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(10, 2)))
    by_pk = check_input(s, TABLE, cfg(write_mode="upsert"))
    assert by_pk.keys == ("id",) and by_pk.update_columns == ("name", "amount")
    by_unique = check_input(s, TABLE, cfg(write_mode="upsert", key_columns=["amount", "name"]))
    assert by_unique.keys == ("amount", "name") and by_unique.update_columns == ("id",)
    with pytest.raises(
        PostgresSinkError,
        match="not a primary key or unique index",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ) as info:
        check_input(s, TABLE, cfg(write_mode="upsert", key_columns=["name"]))
    assert info.value.column == "name"
    no_pk = TableInfo(
        schema="public", name="log", columns=(col("id", "int8"),), primary_key=(), unique_keys=()
    )
    with pytest.raises(
        PostgresSinkError,
        match="has no primary key; pass key_columns",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ):
        check_input(schema(("id", pa.int64())), no_pk, cfg(write_mode="upsert"))


@pytest.mark.parametrize(
    ("fields", "mode", "column", "match"),
    [
        ((("id", pa.int64()), ("color", pa.string())), "append", "color", "does not exist"),
        ((("name", pa.string()),), "append", "id", "NOT NULL without a default"),
        ((("id", pa.int64()), ("total", pa.int64())), "append", "total", "generated"),
        ((("id", pa.int64()), ("seq", pa.int64())), "append", "seq", "generated"),
        ((("id", pa.int32()), ("amount", pa.float64())), "append", "amount", "numeric"),
        ((("id", pa.int64()), ("_eos_seq", pa.int64())), "append", "_eos_seq", "reserved"),
        ((("id", pa.int64()),), "changelog", "op", "needs a string column 'op'"),
        ((("id", pa.int64()), ("op", pa.int32())), "changelog", "op", "needs a string column"),
    ],
)
def test_input_errors_name_the_column(
    fields: tuple[tuple[str, pa.DataType], ...], mode: str, column: str, match: str
) -> None:
    with pytest.raises(
        PostgresSinkError, match=match, check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        check_input(schema(*fields), TABLE, cfg(write_mode=mode))
    assert info.value.column == column


def test_changelog_layout_keeps_op_out_of_the_written_columns() -> None:
    layout = check_input(
        schema(("id", pa.int64()), ("op", pa.string()), ("name", pa.string())),
        TABLE,
        cfg(write_mode="changelog"),
    )
    assert layout.write_mode is WriteMode.CHANGELOG and layout.op_column == "op"
    assert layout.column_names == ("id", "name") and layout.keys == ("id",)


def test_layout_digest_follows_the_columns() -> None:
    a = TableLayout(
        schema="s",
        table="t",
        write_mode=WriteMode.UPSERT,
        columns=(("id", "bigint"),),
        arrow_types=("int64",),
        keys=("id",),
    )
    b = TableLayout(
        schema="s",
        table="t",
        write_mode=WriteMode.UPSERT,
        columns=(("id", "integer"),),
        arrow_types=("int32",),
        keys=("id",),
    )
    assert a.digest() != b.digest() and a.digest() == TableLayout(**vars(a)).digest()
