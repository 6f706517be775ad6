"""Tables that follow the stream, without a server: types, the planned table, the DDL text."""

from __future__ import annotations

import pickle

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from connectors.postgres import PostgresCode, PostgresSinkConfig, PostgresSinkError
from connectors.postgres._ddl import (
    check_layout,
    column_type,
    layout_ddl,
    planned_table,
    quote_ident,
)
from connectors.postgres._resource import PostgresResource
from connectors.postgres._schema import TableInfo, check_input, written_fields
from connectors.postgres._types import check_column_type
from connectors.stage import StageCode
from tests.postgres.test_pg_input_check import col
from txn import TxnCode

DSN = "host=127.0.0.1 port=1"


def cfg(**kwargs: object) -> PostgresSinkConfig:
    args: dict[str, object] = {"dsn": DSN, "table": "Orders", "schema": "my schema"}
    return PostgresSinkConfig.build(sink_id="s", **{**args, **kwargs})


def fields(*pairs: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in pairs] + [pa.field("_eos_hash", pa.int64())])


def text(statement: sql.Composed) -> str:
    """The statement as PostgreSQL receives it (quoting by psycopg's own rules)."""
    return statement.as_string(psycopg.adapt.Transformer())  # type: ignore[arg-type]


# Every Arrow type Spark hands to mapInArrow, with the column the sink creates for it.
MAPPED = [
    (pa.bool_(), "boolean", "bool"),
    (pa.int8(), "smallint", "int2"),
    (pa.int16(), "smallint", "int2"),
    (pa.int32(), "integer", "int4"),
    (pa.int64(), "bigint", "int8"),
    (pa.float32(), "real", "float4"),
    (pa.float64(), "double precision", "float8"),
    (pa.decimal128(10, 2), "numeric(10,2)", "numeric"),
    (pa.decimal128(38, 0), "numeric(38,0)", "numeric"),
    (pa.string(), "text", "text"),
    (pa.large_string(), "text", "text"),
    (pa.binary(), "bytea", "bytea"),
    (pa.date32(), "date", "date"),
    (pa.timestamp("us", tz="UTC"), "timestamp with time zone", "timestamptz"),
    (pa.timestamp("us"), "timestamp without time zone", "timestamp"),
]


@pytest.mark.parametrize(("arrow", "type_sql", "base"), MAPPED)
def test_created_columns_take_their_input_type_as_the_input_check_maps_it(
    arrow: pa.DataType, type_sql: str, base: str
) -> None:
    assert column_type("c", arrow) == (type_sql, base)
    check_column_type("c", arrow, base, type_sql)  # the created column accepts the input


@pytest.mark.parametrize(
    ("arrow", "hint"),
    [
        (pa.null(), "cast it in Spark"),
        (pa.list_(pa.int64()), "to_json"),
        (pa.struct([("a", pa.int64())]), "to_json"),
        (pa.duration("us"), "simple type"),
    ],
)
def test_types_without_a_column_type_are_refused_naming_the_column(
    arrow: pa.DataType, hint: str
) -> None:
    with pytest.raises(
        PostgresSinkError, match=hint, check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        column_type("odd", arrow)
    assert info.value.column == "odd"


def test_names_postgresql_would_truncate_are_refused() -> None:
    with pytest.raises(
        PostgresSinkError, match="63 bytes", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ):
        column_type("x" * 64, pa.int64())
    assert column_type("é" * 31, pa.int64()) == ("bigint", "int8")  # 62 bytes


def test_create_table_plans_every_written_column_and_the_key() -> None:
    c = cfg(create_table=True, write_mode="upsert", key_columns=["id", "Kind"])
    schema = fields(("id", pa.int64()), ("Kind", pa.string()), ("v", pa.float64()))
    table = planned_table(None, written_fields(schema, c), c)
    assert [(x.name, x.type_sql, x.not_null) for x in table.columns] == [
        ("id", "bigint", True),
        ("Kind", "text", True),
        ("v", "double precision", False),
    ]
    layout = check_input(schema, table, c)
    assert layout.keys == ("id", "Kind") and layout.update_columns == ("v",)
    (create,) = layout_ddl(c, layout, None)
    assert text(create) == (
        'CREATE TABLE IF NOT EXISTS "my schema"."Orders" ("id" bigint, "Kind" text, '
        '"v" double precision, PRIMARY KEY ("id", "Kind"))'
    )


def test_identifiers_are_quoted_in_the_ddl() -> None:
    c = cfg(create_table=True)
    odd = 'we"ird; DROP TABLE x'
    schema = fields((odd, pa.string()), ("n", pa.int32()))
    layout = check_input(schema, planned_table(None, written_fields(schema, c), c), c)
    (create,) = layout_ddl(c, layout, None)
    assert text(create) == (
        'CREATE TABLE IF NOT EXISTS "my schema"."Orders" ("we""ird; DROP TABLE x" text, '
        '"n" integer)'
    )
    assert quote_ident(odd) == '"we""ird; DROP TABLE x"'


def test_changelog_op_and_hash_columns_are_not_created() -> None:
    c = cfg(create_table=True, write_mode="changelog", key_columns=["id"])
    schema = fields(("id", pa.int64()), ("v", pa.string()), ("op", pa.string()))
    table = planned_table(None, written_fields(schema, c), c)
    assert [x.name for x in table.columns] == ["id", "v"]


def test_a_missing_table_without_create_table_says_how_to_create_it() -> None:
    with pytest.raises(
        PostgresSinkError,
        match="create_table=True",
        check=lambda e: e.code is PostgresCode.TABLE_NOT_FOUND,
    ):
        planned_table(None, [pa.field("id", pa.int64())], cfg())


EXISTING = TableInfo(
    schema="my schema",
    name="Orders",
    columns=(col("id", "int4", "integer", not_null=True), col("name", "text")),
    primary_key=("id",),
    unique_keys=(frozenset({"id"}),),
)


def test_evolve_schema_adds_the_gained_columns_nullable_and_only_those() -> None:
    c = cfg(evolve_schema=True)
    schema = fields(("id", pa.int32()), ("note", pa.string()), ("at", pa.timestamp("us", "UTC")))
    table = planned_table(EXISTING, written_fields(schema, c), c)
    assert [(x.name, x.type_sql, x.not_null) for x in table.columns] == [
        ("id", "integer", True),
        ("name", "text", False),
        ("note", "text", False),
        ("at", "timestamp with time zone", False),
    ]
    layout = check_input(schema, table, c)
    (alter,) = layout_ddl(c, layout, EXISTING)
    assert text(alter) == (
        'ALTER TABLE "my schema"."Orders" ADD COLUMN IF NOT EXISTS "note" text, '
        'ADD COLUMN IF NOT EXISTS "at" timestamp with time zone'
    )
    # The same input against the evolved table: nothing to do, the same layout.
    assert layout_ddl(c, layout, table) == []
    assert check_input(schema, planned_table(table, written_fields(schema, c), c), c) == layout


def test_without_evolve_schema_a_new_column_is_the_input_check_s_error() -> None:
    schema = fields(("id", pa.int32()), ("note", pa.string()))
    table = planned_table(EXISTING, written_fields(schema, cfg()), cfg())
    assert table is EXISTING
    with pytest.raises(
        PostgresSinkError,
        match="'note' does not exist",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ):
        check_input(schema, table, cfg())


def test_a_type_change_is_refused_with_the_statement_it_would_need() -> None:
    c = cfg(evolve_schema=True)
    schema = fields(("id", pa.int64()), ("name", pa.string()))  # long into integer
    with pytest.raises(
        PostgresSinkError,
        match="never changes a type",
        check=lambda e: e.code is PostgresCode.SCHEMA_EVOLUTION,
    ) as info:
        planned_table(EXISTING, written_fields(schema, c), c)
    assert info.value.column == "id"
    assert info.value.needed == 'ALTER TABLE "my schema"."Orders" ALTER COLUMN "id" TYPE bigint'
    assert not info.value.retry_stage


def test_a_not_null_column_missing_from_the_input_is_refused() -> None:
    c = cfg(evolve_schema=True)
    schema = fields(("name", pa.string()))
    with pytest.raises(
        PostgresSinkError,
        match="never drops",
        check=lambda e: e.code is PostgresCode.SCHEMA_EVOLUTION,
    ) as info:
        planned_table(EXISTING, written_fields(schema, c), c)
    assert info.value.column == "id"
    assert info.value.needed.endswith('ALTER COLUMN "id" DROP NOT NULL')


def test_a_nullable_column_missing_from_the_input_is_fine() -> None:
    c = cfg(evolve_schema=True)
    schema = fields(("id", pa.int32()))
    assert planned_table(EXISTING, written_fields(schema, c), c) is EXISTING


def test_the_evolution_error_pickles_with_its_attributes() -> None:
    err = PostgresSinkError("m", column="c", needed="ALTER ...", code=PostgresCode.SCHEMA_EVOLUTION)
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.column, back.needed) == (
        PostgresSinkError,
        "[schema-evolution] m",
        "c",
        "ALTER ...",
    )


def test_check_layout_refuses_a_table_changed_by_someone_else() -> None:
    c = cfg(evolve_schema=True)
    schema = fields(("id", pa.int32()), ("note", pa.string()))
    layout = check_input(schema, planned_table(EXISTING, written_fields(schema, c), c), c)
    with pytest.raises(
        PostgresSinkError,
        match="'note' .* is missing",
        check=lambda e: e.code is PostgresCode.TABLE_CHANGED,
    ):
        check_layout(EXISTING, layout)
    other = TableInfo(
        schema="my schema",
        name="Orders",
        columns=(*EXISTING.columns, col("note", "int8", "bigint")),
        primary_key=("id",),
        unique_keys=(),
    )
    with pytest.raises(
        PostgresSinkError, match="is bigint", check=lambda e: e.code is PostgresCode.TABLE_CHANGED
    ):
        check_layout(other, layout)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"create_table": "yes"}, "create_table must be True or False"),
        ({"evolve_schema": 1}, "evolve_schema must be True or False"),
        ({"create_table": True, "write_mode": "upsert"}, "needs key_columns"),
    ],
)
def test_bad_follow_options_are_refused_at_construction(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(PostgresSinkError, match=match, check=lambda e: e.code is TxnCode.CONFIG):
        cfg(**kwargs)


def test_the_plan_fingerprint_covers_the_layout_only_when_the_table_follows() -> None:
    schema = fields(("id", pa.int32()), ("note", pa.string()))
    narrow = fields(("id", pa.int32()))
    for c in (cfg(evolve_schema=True), cfg(create_table=True)):
        start = EXISTING if c.evolve_schema else None
        wide = check_input(schema, planned_table(start, written_fields(schema, c), c), c)
        less = check_input(narrow, planned_table(start, written_fields(narrow, c), c), c)
        resource = PostgresResource(cfg=c, two_phase=True)
        assert resource.with_layout(wide).fingerprint() != resource.with_layout(less).fingerprint()
        assert resource.with_layout(wide).fingerprint() == resource.with_layout(wide).fingerprint()
    plain = PostgresResource(cfg=cfg(), two_phase=True)
    less = check_input(narrow, EXISTING, cfg())
    assert plain.with_layout(less).fingerprint() == cfg().fingerprint()  # unchanged for others
