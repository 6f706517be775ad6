"""Schemas derived from Spark types (writing) and Spark types from Avro schemas (reading).

Derivation is deterministic (same Spark type, same schema text), so registering it again
finds the same schema id. Nullable Spark fields become unions with null (default null)
in Avro and are left out of ``required`` in JSON Schema. Types without a faithful mapping
raise :class:`connectors.stage.StageCode.INPUT_SCHEMA` naming the field and the fix.

Avro mapping (Spark -> Avro): string -> string, binary -> bytes, boolean -> boolean,
byte/short/int -> int, long -> long, float -> float, double -> double, date -> int
(date), timestamp -> long (timestamp-micros), decimal(p,s) -> bytes (decimal), array ->
array, struct -> record (nested records named ``{parent}_{field}``). Maps are refused
(Arrow hands them over as pairs, not as the dict Avro's writer needs).
JSON Schema: string, boolean, integer, number, array and object only (cast others to
string in Spark).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from connectors.kafka._errors import KafkaConnectorError
from connectors.stage import StageCode

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

_AVRO_SIMPLE: dict[str, Any] = {
    "string": "string",
    "binary": "bytes",
    "boolean": "boolean",
    "tinyint": "int",
    "smallint": "int",
    "int": "int",
    "bigint": "long",
    "float": "float",
    "double": "double",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
}
_JSON_SIMPLE = {
    "string": "string",
    "boolean": "boolean",
    "tinyint": "integer",
    "smallint": "integer",
    "int": "integer",
    "bigint": "integer",
    "float": "number",
    "double": "number",
}


def _unsupported(column: str, path: str, dtype: DataType, what: str, fix: str) -> None:
    msg = (
        f"column {column!r}: field {path or column!r} has type {dtype.simpleString()}, which "
        f"the derived {what} schema cannot represent; {fix}"
    )
    raise KafkaConnectorError(msg, column=column, code=StageCode.INPUT_SCHEMA)


def avro_schema(dtype: DataType, column: str, name: str) -> str:
    """Return the Avro schema text for a column of Spark type ``dtype`` (top level not null)."""
    return json.dumps(_avro(dtype, column, "", name), sort_keys=True, separators=(",", ":"))


def _avro(dtype: DataType, column: str, path: str, name: str) -> Any:
    from pyspark.sql.types import ArrayType, DecimalType, StructType

    simple = dtype.simpleString()
    if simple in _AVRO_SIMPLE:
        return _AVRO_SIMPLE[simple]
    if isinstance(dtype, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": dtype.precision,
            "scale": dtype.scale,
        }
    if isinstance(dtype, ArrayType):
        items = _avro(dtype.elementType, column, f"{path}[]", f"{name}_item")
        return {"type": "array", "items": _nullable(items) if dtype.containsNull else items}
    if isinstance(dtype, StructType):
        fields = []
        for f in dtype.fields:
            inner = _avro(f.dataType, column, f"{path}.{f.name}".lstrip("."), f"{name}_{f.name}")
            entry: dict[str, Any] = {"name": f.name, "type": inner}
            if f.nullable:
                entry = {"name": f.name, "type": _nullable(inner), "default": None}
            fields.append(entry)
        return {"type": "record", "name": name, "fields": fields}
    _unsupported(
        column, path, dtype, "Avro", "convert it (a map to an array of structs) or pass schema="
    )
    raise AssertionError  # pragma: no cover - _unsupported raises


def _nullable(inner: Any) -> list[Any]:
    return ["null", inner]


def json_schema(dtype: DataType, column: str, title: str) -> str:
    """Return the JSON Schema text for a column of Spark type ``dtype``."""
    doc = {"$schema": "http://json-schema.org/draft-07/schema#", "title": title}
    doc.update(_json(dtype, column, ""))
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _json(dtype: DataType, column: str, path: str) -> dict[str, Any]:
    from pyspark.sql.types import ArrayType, StructType

    simple = dtype.simpleString()
    if simple in _JSON_SIMPLE:
        return {"type": _JSON_SIMPLE[simple]}
    if isinstance(dtype, ArrayType):
        items = _json(dtype.elementType, column, f"{path}[]")
        return {"type": "array", "items": _json_nullable(items, dtype.containsNull)}
    if isinstance(dtype, StructType):
        props = {
            f.name: _json_nullable(
                _json(f.dataType, column, f"{path}.{f.name}".lstrip(".")), f.nullable
            )
            for f in dtype.fields
        }
        required = [f.name for f in dtype.fields if not f.nullable]
        return {"type": "object", "properties": props, "required": required}
    _unsupported(column, path, dtype, "JSON", "cast it to string in Spark or pass schema=")
    raise AssertionError  # pragma: no cover - _unsupported raises


def _json_nullable(inner: dict[str, Any], nullable: bool) -> dict[str, Any]:
    if not nullable:
        return inner
    return {"oneOf": [{"type": "null"}, inner]}


def avro_record_name(schema_text: str) -> str | None:
    """Return the full name of the Avro schema's top-level named type (None for others)."""
    doc = json.loads(schema_text)
    if not isinstance(doc, dict) or "name" not in doc:
        return None
    name = str(doc["name"])
    namespace = doc.get("namespace")
    return f"{namespace}.{name}" if namespace and "." not in name else name


def json_title(schema_text: str) -> str | None:
    """Return the JSON Schema's ``title`` (Confluent's record name for JSON Schema)."""
    doc = json.loads(schema_text)
    title = doc.get("title") if isinstance(doc, dict) else None
    return str(title) if title is not None else None


# -- reading: Avro schema -> Spark type ---------------------------------------------------
_SPARK_SIMPLE = {
    "string": "StringType",
    "bytes": "BinaryType",
    "boolean": "BooleanType",
    "int": "IntegerType",
    "long": "LongType",
    "float": "FloatType",
    "double": "DoubleType",
}


def spark_type_of_avro(schema_text: str) -> DataType:
    """Return the Spark type of values read with the Avro ``schema_text`` (the reader schema).

    Raises:
        StageCode.INPUT_SCHEMA: a type without a Spark counterpart (a union of several
            non-null types, an enum is read as string, a map needs string keys).

    """
    return _spark(json.loads(schema_text), {})


def _spark(schema: Any, named: dict[str, DataType]) -> DataType:
    from pyspark.sql import types as T  # noqa: N812 - Spark's customary alias

    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            msg = f"an Avro union of {schema!r} has no Spark type; read the value as binary"
            raise KafkaConnectorError(msg, column="value", code=StageCode.INPUT_SCHEMA)
        return _spark(branches[0], named)
    if isinstance(schema, str):
        if schema in _SPARK_SIMPLE:
            return getattr(T, _SPARK_SIMPLE[schema])()  # type: ignore[no-any-return]
        if schema in named:
            return named[schema]
        msg = f"Avro type {schema!r} is unknown here (named types must be defined first)"
        raise KafkaConnectorError(msg, column="value", code=StageCode.INPUT_SCHEMA)
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "date":
        return T.DateType()
    if logical in ("timestamp-micros", "timestamp-millis"):
        return T.TimestampType()
    if logical == "decimal":
        return T.DecimalType(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind == "record":
        fields = [
            T.StructField(f["name"], _spark(f["type"], named), _nullable_avro(f["type"]))
            for f in schema["fields"]
        ]
        struct = T.StructType(fields)
        named[schema["name"]] = struct
        return struct
    if kind == "array":
        return T.ArrayType(_spark(schema["items"], named), _nullable_avro(schema["items"]))
    if kind == "map":
        return T.MapType(T.StringType(), _spark(schema["values"], named))
    if kind == "enum":
        return T.StringType()
    if kind == "fixed":
        return T.BinaryType()
    return _spark(kind, named)


def _nullable_avro(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema


def struct_of(schema: StructType, name: str) -> DataType | None:
    """Return the Spark type of column ``name`` in ``schema`` (None if absent)."""
    for f in schema.fields:
        if f.name == name:
            return f.dataType
    return None
