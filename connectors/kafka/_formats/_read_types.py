"""Spark types of decoded JSON Schema and Protobuf values, and Protobuf messages as rows.

Reading side of the formats (the Avro mapping lives in ``_schemas`` beside the writing one).

JSON Schema -> Spark: ``string`` -> string, ``integer`` -> bigint, ``number`` -> double,
``boolean`` -> boolean, ``array`` -> array of its ``items``, ``object`` with
``properties`` -> struct (fields in the schema's property order, all nullable); a type
list or ``oneOf`` / ``anyOf`` of one type and ``null`` -> that type. Anything else (a
``$ref``, an object without properties, a union of several types) has no derived Spark
type: :class:`connectors.stage.StageCode.INPUT_SCHEMA` asks for ``spark_schema=``.

Protobuf -> Spark, from the message's descriptor: int32/sint32/sfixed32 -> int,
uint32 and the 64-bit integers -> bigint, float -> float, double -> double, bool ->
boolean, string -> string, bytes -> binary, enum -> string (the value's name), message ->
struct, repeated -> array, map -> map. A recursive message has no Spark type.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from connectors.kafka._errors import KafkaConnectorError
from connectors.stage import StageCode

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

_JSON_TYPES = {
    "string": "StringType",
    "integer": "LongType",
    "number": "DoubleType",
    "boolean": "BooleanType",
}


def _no_type(column: str, what: str, fix: str) -> KafkaConnectorError:
    return KafkaConnectorError(
        f"column {column!r}: {what} has no Spark type; {fix}",
        column=column,
        code=StageCode.INPUT_SCHEMA,
    )


def spark_type_of_json_schema(schema_text: str, column: str) -> DataType:
    """Return the Spark type of values valid under the JSON Schema ``schema_text``.

    Raises:
        StageCode.INPUT_SCHEMA: a construct without a derived type (module docstring).

    """
    return _json(json.loads(schema_text), column, "the schema")


def _json(node: Any, column: str, path: str) -> DataType:
    from pyspark.sql import types as T  # noqa: N812 - Spark's customary alias

    fix = "pass spark_schema= (the Spark type of the decoded values)"
    if not isinstance(node, dict):
        raise _no_type(column, f"{path} ({node!r})", fix)
    kind = node.get("type")
    for union in ("oneOf", "anyOf"):
        if union in node:
            branches = [b for b in node[union] if b != {"type": "null"}]
            if len(branches) != 1:
                raise _no_type(column, f"{path}: a {union} of several types", fix)
            return _json(branches[0], column, path)
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise _no_type(column, f"{path}: the type list {kind!r}", fix)
        kind = kinds[0]
    if kind in _JSON_TYPES:
        return getattr(T, _JSON_TYPES[kind])()  # type: ignore[no-any-return]
    if kind == "array" and "items" in node:
        return T.ArrayType(_json(node["items"], column, f"{path}[]"), True)
    if kind == "object" and isinstance(node.get("properties"), dict):
        return T.StructType(
            [
                T.StructField(name, _json(sub, column, f"{path}.{name}"), True)
                for name, sub in node["properties"].items()
            ]
        )
    raise _no_type(column, f"{path} ({json.dumps(node)[:120]})", fix)


def spark_type_of_message(descriptor: Any, column: str, seen: tuple[str, ...] = ()) -> DataType:
    """Return the Spark struct type of a Protobuf message ``descriptor`` (module docstring).

    Raises:
        StageCode.INPUT_SCHEMA: a recursive message.

    """
    from pyspark.sql import types as T  # noqa: N812 - Spark's customary alias

    if descriptor.full_name in seen:
        msg = f"message {descriptor.full_name} is recursive"
        raise _no_type(column, msg, "decode into binary and parse it yourself")
    inner = (*seen, descriptor.full_name)
    fields = []
    for f in descriptor.fields:
        if _is_map(f):
            key, value = (
                f.message_type.fields_by_name["key"],
                f.message_type.fields_by_name["value"],
            )
            dtype: DataType = T.MapType(_field(key, column, inner), _field(value, column, inner))
        elif _is_repeated(f):
            dtype = T.ArrayType(_field(f, column, inner), True)
        else:
            dtype = _field(f, column, inner)
        fields.append(T.StructField(f.name, dtype, True))
    return T.StructType(fields)


def _field(f: Any, column: str, seen: tuple[str, ...]) -> DataType:
    from pyspark.sql import types as T  # noqa: N812 - Spark's customary alias

    if f.type == f.TYPE_MESSAGE:
        return spark_type_of_message(f.message_type, column, seen)
    if f.type == f.TYPE_ENUM:
        return T.StringType()
    by_type = {
        f.TYPE_INT32: T.IntegerType,
        f.TYPE_SINT32: T.IntegerType,
        f.TYPE_SFIXED32: T.IntegerType,
        f.TYPE_FLOAT: T.FloatType,
        f.TYPE_DOUBLE: T.DoubleType,
        f.TYPE_BOOL: T.BooleanType,
        f.TYPE_STRING: T.StringType,
        f.TYPE_BYTES: T.BinaryType,
    }
    return by_type.get(f.type, T.LongType)()  # the rest: 64-bit and unsigned integers


def _is_repeated(f: Any) -> bool:
    repeated = getattr(f, "is_repeated", None)  # protobuf 6+; older ones have label only
    return bool(f.label == f.LABEL_REPEATED if repeated is None else repeated)


def _is_map(f: Any) -> bool:
    return _is_repeated(f) and f.type == f.TYPE_MESSAGE and f.message_type.GetOptions().map_entry


def message_row(message: Any) -> dict[str, Any] | None:
    """Return a decoded message as the dict of its Spark struct (None stays None).

    A message field that is not set, and a scalar with presence (proto3 ``optional``) that
    is not set, are null; other scalars keep proto3's default (0, "", false).
    """
    if message is None:
        return None
    row: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if _is_map(f):
            vf = f.message_type.fields_by_name["value"]
            row[f.name] = [(k, _scalar(vf, v)) for k, v in value.items()]
        elif _is_repeated(f):
            row[f.name] = [_scalar(f, v) for v in value]
        elif getattr(f, "has_presence", f.type == f.TYPE_MESSAGE) and not message.HasField(f.name):
            row[f.name] = None
        else:
            row[f.name] = _scalar(f, value)
    return row


def _scalar(f: Any, value: Any) -> Any:
    if f.type == f.TYPE_MESSAGE:
        return message_row(value)
    if f.type == f.TYPE_ENUM:
        found = f.enum_type.values_by_number.get(value)
        return found.name if found is not None else str(value)
    return value
