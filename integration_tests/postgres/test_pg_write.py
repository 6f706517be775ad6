"""Introspection, the input check and the bulk writer against a real PostgreSQL server."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from connectors.postgres import PostgresCode, PostgresSinkConfig, PostgresSinkError
from connectors.postgres._classify import to_sink_error
from connectors.postgres._control import ensure_control_tables, load_table_name, qualified
from connectors.postgres._schema import check_input, describe_table
from connectors.postgres._writer import BulkWriter, ensure_load_table
from connectors.stage import StageCode
from integration_tests.postgres.conftest import Conn, with_hash

Make = Callable[..., PostgresSinkConfig]


def create(pg: Conn, schema: str, ddl: str) -> None:
    pg.execute(sql.SQL(ddl).format(t=qualified(schema, "t")))


def write(pg: Conn, cfg: PostgresSinkConfig, batches: list[pa.RecordBatch]) -> int:
    """Check the input, then write it in one transaction (load table if needed)."""
    layout = check_input(batches[0].schema, describe_table(pg, cfg.schema, cfg.table), cfg)
    load_table = None
    if layout.keys:
        ensure_control_tables(pg, cfg.control_schema)
        name = load_table_name(cfg.sink_id, 0, layout.digest())
        ensure_load_table(pg, layout, cfg.control_schema, name)
        load_table = qualified(cfg.control_schema, name)
    try:
        with pg.transaction():
            return BulkWriter(pg, layout, load_table).write(batches)
    except psycopg.Error as exc:
        raise to_sink_error(exc, "test write") from exc


def rows(pg: Conn, schema: str, order: str = "1") -> list[tuple[Any, ...]]:
    query = sql.SQL("SELECT * FROM {} ORDER BY " + order).format(qualified(schema, "t"))
    return pg.execute(query).fetchall()


def test_every_supported_type_round_trips(pg: Conn, schema: str, make_cfg: Make) -> None:
    pg.execute(sql.SQL("CREATE TYPE {}.mood AS ENUM ('ok', 'sad')").format(sql.Identifier(schema)))
    create(
        pg,
        schema,
        (
            "CREATE TABLE {t} (i2 smallint, i4 integer, i8 bigint, n numeric(12,3), f4 real, "
            f"f8 double precision, b boolean, s text, v varchar(8), j jsonb, u uuid, m {schema}.mood, "
            "d date, ts timestamp, tz timestamptz, tm time, by bytea, iv interval)"
        ),
    )
    when = dt.datetime(2024, 2, 29, 23, 59, 58, 123456)
    uid = uuid.uuid4()
    batch = with_hash(
        {
            "i2": pa.array([-32768, None], pa.int16()),
            "i4": pa.array([2**31 - 1, 0], pa.int32()),
            "i8": pa.array([-(2**63), 1]),
            "n": pa.array([decimal.Decimal("-12.345"), None], pa.decimal128(12, 3)),
            "f4": pa.array([1.5, None], pa.float32()),
            "f8": pa.array([math.inf, math.nan]),
            "b": pa.array([True, None]),
            "s": pa.array(['a "q",\nb', ""]),
            "v": pa.array(["ünïcødé", None]),
            "j": pa.array(['{"k": [1, 2]}', None]),
            "u": pa.array([str(uid), None]),
            "m": pa.array(["sad", None]),
            "d": pa.array([dt.date(1999, 12, 31), None]),
            "ts": pa.array([when, None]),
            "tz": pa.array([when, None], pa.timestamp("us", tz="UTC")),
            "tm": pa.array([dt.time(1, 2, 3, 4), None], pa.time64("us")),
            "by": pa.array([b"\x00\x01\xfe", b""]),
            "iv": pa.array(["1 day 2 hours", None]),
        }
    )
    assert write(pg, make_cfg(), [batch]) == 2
    first, second = rows(pg, schema, "i4 DESC")
    assert first == (
        -32768,
        2**31 - 1,
        -(2**63),
        decimal.Decimal("-12.345"),
        1.5,
        math.inf,
        True,
        'a "q",\nb',
        "ünïcødé",
        {"k": [1, 2]},
        uid,
        "sad",
        dt.date(1999, 12, 31),
        when,
        when.replace(tzinfo=dt.timezone.utc),
        dt.time(1, 2, 3, 4),
        b"\x00\x01\xfe",
        dt.timedelta(days=1, hours=2),
    )
    assert second[:6] == (None, 0, 1, None, None, second[5]) and math.isnan(second[5])
    assert second[6:] == (None, "", None, None, None, None, None, None, None, None, b"", None)


def test_introspection_reports_keys_limits_and_generated_columns(pg: Conn, schema: str) -> None:
    pg.execute(sql.SQL("CREATE DOMAIN {}.code AS varchar(4)").format(sql.Identifier(schema)))
    create(
        pg,
        schema,
        (
            f"CREATE TABLE {{t}} (id bigint PRIMARY KEY, c {schema}.code, name char(3) NOT NULL, "
            "total numeric GENERATED ALWAYS AS (id * 2) STORED, "
            "seq bigint GENERATED ALWAYS AS IDENTITY, d date DEFAULT now(), UNIQUE (name, d))"
        ),
    )
    info = describe_table(pg, schema, "t")
    by_name = {c.name: c for c in info.columns}
    assert info.primary_key == ("id",)
    assert set(info.unique_keys) == {frozenset({"id"}), frozenset({"name", "d"})}
    assert by_name["c"].base_type == "varchar" and by_name["name"].max_chars == 3
    assert by_name["name"].not_null and by_name["d"].has_default
    assert by_name["total"].generated and by_name["seq"].identity_always
    with pytest.raises(
        PostgresSinkError,
        match=f"{schema}.missing does not exist",
        check=lambda e: e.code is PostgresCode.TABLE_NOT_FOUND,
    ):
        describe_table(pg, schema, "missing")


def test_a_missing_or_mistyped_column_is_named_before_anything_is_written(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    create(pg, schema, "CREATE TABLE {t} (id integer PRIMARY KEY, name text NOT NULL)")
    info = describe_table(pg, schema, "t")
    wrong_type = with_hash({"id": pa.array([1]), "name": pa.array(["a"])})  # int64 into integer
    with pytest.raises(
        PostgresSinkError,
        match="'id'.*LongType.*integer",
        check=lambda e: e.code in (StageCode.INPUT_SCHEMA, PostgresCode.SCHEMA_EVOLUTION),
    ) as info_err:
        check_input(wrong_type.schema, info, make_cfg())
    assert info_err.value.column == "id"
    extra = with_hash(
        {"id": pa.array([1], pa.int32()), "name": pa.array(["a"]), "color": pa.array(["red"])}
    )
    with pytest.raises(
        PostgresSinkError,
        match="'color' does not exist",
        check=lambda e: e.code in (StageCode.INPUT_SCHEMA, PostgresCode.SCHEMA_EVOLUTION),
    ):
        check_input(extra.schema, info, make_cfg())
    assert rows(pg, schema) == []


def test_upsert_updates_existing_rows_and_keeps_the_last_row_of_a_key(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    create(pg, schema, "CREATE TABLE {t} (id bigint PRIMARY KEY, name text, n integer)")
    pg.execute(
        sql.SQL("INSERT INTO {} VALUES (1, 'old', 0), (9, 'keep', 9)").format(
            qualified(schema, "t")
        )
    )
    cfg = make_cfg(write_mode="upsert")
    first = with_hash(
        {
            "id": pa.array([1, 2, 2]),
            "name": pa.array(["new", "a", "b"]),
            "n": pa.array([1, 2, 3], pa.int32()),
        }
    )
    second = with_hash(
        {"id": pa.array([2, 3]), "name": pa.array(["c", None]), "n": pa.array([4, 5], pa.int32())}
    )
    assert write(pg, cfg, [first, second]) == 5
    assert rows(pg, schema) == [(1, "new", 1), (2, "c", 4), (3, None, 5), (9, "keep", 9)]
    load_tables = pg.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename LIKE 'stage_%%'",
        (schema,),
    ).fetchone()
    assert load_tables == (1,)
    persistence = pg.execute(
        "SELECT c.relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname LIKE 'stage_%%'",
        (schema,),
    ).fetchone()
    assert persistence == ("u",)  # unlogged, not temporary (PREPARE refuses temp tables)


def test_changelog_applies_the_last_op_of_each_key(pg: Conn, schema: str, make_cfg: Make) -> None:
    create(pg, schema, "CREATE TABLE {t} (id bigint PRIMARY KEY, name text NOT NULL)")
    pg.execute(
        sql.SQL("INSERT INTO {} VALUES (1, 'a'), (2, 'b'), (3, 'c')").format(qualified(schema, "t"))
    )
    batch = with_hash(
        {
            "id": pa.array([1, 1, 1, 2, 4, 4, 5, 3]),
            "name": pa.array(["a", "a2", "a3", None, "d", None, "e", "c"]),
            "op": pa.array(
                [
                    "update_before",
                    "update_after",
                    "update_after",
                    "delete",
                    "insert",
                    "delete",
                    "insert",
                    "update_before",
                ]
            ),
        }
    )
    written = write(pg, make_cfg(write_mode="changelog"), [batch])
    assert written == 6  # the two update_before rows are dropped
    assert rows(pg, schema) == [(1, "a3"), (3, "c"), (5, "e")]


def test_value_errors_are_typed_name_the_column_and_leave_nothing(
    pg: Conn, schema: str, make_cfg: Make
) -> None:
    create(
        pg,
        schema,
        (
            "CREATE TABLE {t} (id integer PRIMARY KEY, name varchar(4), amount numeric(4,1) "
            "CHECK (amount >= 0))"
        ),
    )

    def attempt(ids: list[int], names: list[str | None], amounts: list[str]) -> None:
        batch = with_hash(
            {
                "id": pa.array(ids, pa.int32()),
                "name": pa.array(names),
                "amount": pa.array([decimal.Decimal(a) for a in amounts], pa.decimal128(6, 1)),
            }
        )
        write(pg, make_cfg(), [batch])

    with pytest.raises(
        PostgresSinkError,
        match="5 characters",
        check=lambda e: e.code is PostgresCode.VALUE_TOO_LARGE,
    ) as too_long:
        attempt([1, 2], ["ok", "12345"], ["1", "1"])
    assert too_long.value.column == "name"
    with pytest.raises(
        PostgresSinkError, match="22003", check=lambda e: e.code is PostgresCode.INVALID_VALUE
    ) as overflow:
        attempt([1], ["ok"], ["12345.6"])
    assert "amount" in str(overflow.value)  # COPY's context names the column
    with pytest.raises(
        PostgresSinkError,
        match="23514",
        check=lambda e: e.code is PostgresCode.CONSTRAINT_VIOLATION,
    ):
        attempt([1], ["ok"], ["-1"])
    with pytest.raises(
        PostgresSinkError,
        match="23505",
        check=lambda e: e.code is PostgresCode.CONSTRAINT_VIOLATION,
    ):
        attempt([1, 1], ["a", "b"], ["1", "1"])
    with pytest.raises(
        PostgresSinkError, match="22021", check=lambda e: e.code is PostgresCode.INVALID_VALUE
    ):
        attempt([1], ["a\x00b"], ["1"])
    assert rows(pg, schema) == []


def test_not_null_violation_names_the_column(pg: Conn, schema: str, make_cfg: Make) -> None:
    create(pg, schema, "CREATE TABLE {t} (id integer PRIMARY KEY, name text NOT NULL)")
    batch = with_hash({"id": pa.array([1, 2], pa.int32()), "name": pa.array(["a", None])})
    with pytest.raises(
        PostgresSinkError,
        match="23502",
        check=lambda e: e.code is PostgresCode.CONSTRAINT_VIOLATION,
    ) as info:
        write(pg, make_cfg(), [batch])
    assert info.value.column == "name" and rows(pg, schema) == []
