"""Which Arrow (Spark) type may be written to which PostgreSQL column type.

The rule is "no silent conversion that can lose or misread data":

* integers only into integer columns at least as wide (an int64 into ``integer`` is
  refused: cast it in Spark), or into ``numeric``, or (up to 32 bits) ``double precision``;
* floats into ``real`` / ``double precision`` (float64 only into ``double precision``);
* decimals into ``numeric``; booleans into ``boolean``; binary into ``bytea``;
* dates into ``date``; timestamps with a time zone (Spark ``TimestampType``) into
  ``timestamptz``, without (Spark ``TimestampNTZType``) into ``timestamp``; times into
  ``time``;
* strings into every column type without a rule above: the textual ones (text, varchar,
  char, json, jsonb, uuid, xml, inet, enums, ...) and those without an Arrow counterpart
  (interval, arrays, ranges, ...); PostgreSQL parses the text form;
* an all-null column (Arrow ``null``) into anything; nested Arrow types into nothing
  (serialize them with ``to_json`` and write a json/jsonb column).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from connectors.postgres._errors import PostgresSinkError
from connectors.stage import StageCode


def _int_fits(bits: int) -> Callable[[pa.DataType], bool]:
    def check(t: pa.DataType) -> bool:
        if pa.types.is_signed_integer(t):
            return bool(t.bit_width <= bits)
        if pa.types.is_unsigned_integer(t):
            return bool(t.bit_width < bits)
        return False

    return check


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


_RULES: dict[str, Callable[[pa.DataType], bool]] = {
    "int2": _int_fits(16),
    "int4": _int_fits(32),
    "int8": _int_fits(64),
    "numeric": lambda t: bool(pa.types.is_integer(t) or pa.types.is_decimal(t)),
    "float4": lambda t: bool(pa.types.is_float16(t) or pa.types.is_float32(t)),
    "float8": lambda t: bool(pa.types.is_floating(t) or _int_fits(32)(t)),
    "bool": pa.types.is_boolean,
    "bytea": lambda t: bool(pa.types.is_binary(t) or pa.types.is_large_binary(t)),
    "date": pa.types.is_date,
    "timestamp": lambda t: bool(pa.types.is_timestamp(t) and t.tz is None),
    "timestamptz": lambda t: bool(pa.types.is_timestamp(t) and t.tz is not None),
    "time": pa.types.is_time,
}


def spark_name(t: pa.DataType) -> str:
    """Return the Spark SQL type that arrives in Arrow as ``t`` (for error messages)."""
    simple = {
        pa.int8(): "ByteType",
        pa.int16(): "ShortType",
        pa.int32(): "IntegerType",
        pa.int64(): "LongType",
        pa.float32(): "FloatType",
        pa.float64(): "DoubleType",
        pa.bool_(): "BooleanType",
        pa.string(): "StringType",
        pa.large_string(): "StringType",
        pa.binary(): "BinaryType",
        pa.date32(): "DateType",
        pa.null(): "NullType",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_decimal(t):
        return f"DecimalType({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TimestampType" if t.tz is not None else "TimestampNTZType"
    return str(t)


def _hint(base_type: str, type_sql: str) -> str:
    casts = {
        "int2": "'short'",
        "int4": "'int'",
        "int8": "'long'",
        "numeric": "'decimal(p,s)'",
        "float4": "'float'",
        "float8": "'double'",
        "bool": "'boolean'",
        "bytea": "'binary'",
        "date": "'date'",
        "timestamp": "'timestamp_ntz'",
        "timestamptz": "'timestamp'",
        "text": "'string'",
        "varchar": "'string'",
    }
    cast = casts.get(base_type)
    if cast is not None:
        return f"cast it in Spark (col(...).cast({cast})) or change the column to match"
    return f"cast it in Spark to a type matching {type_sql}, or change the column"


def check_column_type(name: str, arrow_type: pa.DataType, base_type: str, type_sql: str) -> None:
    """Raise :class:`StageCode.INPUT_SCHEMA` naming ``name`` unless ``arrow_type`` fits the column."""
    if pa.types.is_null(arrow_type):
        return
    if pa.types.is_nested(arrow_type) or pa.types.is_dictionary(arrow_type):
        msg = (
            f"column {name!r} is {spark_name(arrow_type)}, which the sink does not write; "
            "serialize it with to_json() and write it to a json/jsonb column"
        )
        raise PostgresSinkError(msg, column=name, code=StageCode.INPUT_SCHEMA)
    rule = _RULES.get(base_type)
    # Textual and enum columns take strings; so do types without an Arrow counterpart,
    # which PostgreSQL parses from their text form.
    ok = rule(arrow_type) if rule is not None else _is_string(arrow_type)
    if not ok:
        msg = (
            f"column {name!r}: the input is {spark_name(arrow_type)} (Arrow {arrow_type}) but "
            f"the table column is {type_sql}; {_hint(base_type, type_sql)}"
        )
        raise PostgresSinkError(msg, column=name, code=StageCode.INPUT_SCHEMA)
