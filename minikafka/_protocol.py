"""Wire-format glue over kio: header parsing, version table, generic response building.

Handlers return plain dicts; :func:`build` turns them into the kio dataclass of the
exact request version, dropping keys the version lacks and filling fields the
handler did not set with Kafka's zero values. This keeps handlers version-agnostic.
"""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from collections.abc import Mapping
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1 import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2 import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0 import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1 import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (  # kio's public field introspection
    EntityField,
    EntityTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.static.primitive import i32

from ._errors import ProtocolError
from ._framecheck import check_frame

API_VERSIONS_KEY = 18
_KEY_VERSION = struct.Struct(">hhi")


@cache
def request_class(api_key: int, version: int) -> type[Any]:
    """Kio request dataclass for (api_key, version)."""
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type[Any]:
    """Kio response dataclass for (api_key, version)."""
    return load_response_schema(api_key, version)


def prewarm(versions: dict[int, tuple[int, int]]) -> None:
    """Import and compile the given request/response codecs once (kio loads them lazily).

    Without this the first request of each kind pays for module imports (about a
    second in total on a busy machine), which clients may see as a timeout.
    """
    for api_key, (low, high) in versions.items():
        for version in range(low, high + 1):
            req = request_class(api_key, version)
            entity_reader(req)
            entity_writer(response_class(api_key, version))
            _field_plan(response_class(api_key, version))  # type: ignore[arg-type]


def peek_key_version(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame."""
    if len(frame) < _KEY_VERSION.size:
        msg = f"request frame of {len(frame)} bytes is shorter than a request header"
        raise ProtocolError(msg)
    key, version, corr = _KEY_VERSION.unpack_from(frame, 0)
    return int(key), int(version), int(corr)


def parse_request(frame: bytes, api_key: int, version: int) -> tuple[Any, Any]:
    """Parse header and body of a request whose (key, version) is supported."""
    cls = request_class(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    check_frame(frame, cls)
    try:
        header, used = entity_reader(header_cls)(frame, 0)
        body, _ = entity_reader(cls)(frame, used)
    except Exception as exc:  # kio raises several decode error types
        msg = f"cannot decode {cls.__name__}: {exc!r}"
        raise ProtocolError(msg) from exc
    return header, body


def encode_response(api_key: int, correlation_id: int, response: Any) -> bytes:
    """Serialize a response with the right header version, length-prefixed."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    flexible_header = response.__flexible__ and api_key != API_VERSIONS_KEY
    if flexible_header:
        entity_writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=i32(correlation_id)))
    else:
        entity_writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=i32(correlation_id)))
    entity_writer(type(response))(buf, response)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def ms(value: datetime.timedelta | int | None) -> int:
    """Milliseconds of a kio timedelta field (ints pass through)."""
    if value is None:
        return 0
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


_ZERO_BY_TYPE: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": b"",
    "error_code": ErrorCode.none,
    "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
}


@cache
def _field_plan(cls: type[Any]) -> list[tuple[str, Any, Any, bool, Any]]:
    """(name, nested entity type or None, zero value, is_array, kafka_type) per field."""
    plan = []
    for f in fields(cls):
        fc = classify_field(f)
        nested = fc.type_ if isinstance(fc, EntityField | EntityTupleField) else None
        ktype = None if nested is not None else get_schema_field_type(f)
        if f.default is not MISSING:
            zero = f.default
        elif fc.is_array:
            zero = ()
        elif is_optional(f):
            zero = None
        elif nested is not None:
            zero = build(nested, {})
        else:
            zero = _ZERO_BY_TYPE.get(ktype or "", 0)
        plan.append((f.name, nested, zero, fc.is_array, ktype))
    return plan


def build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """Instantiate kio dataclass ``cls`` from a (possibly nested) dict."""
    kwargs: dict[str, Any] = {}
    for name, nested, zero, is_array, ktype in _field_plan(cls):  # type: ignore[arg-type]
        if name not in data:
            kwargs[name] = zero
            continue
        value = data[name]
        if nested is not None and value is not None:
            if is_array:
                value = tuple(build(nested, v) if isinstance(v, Mapping) else v for v in value)
            elif isinstance(value, Mapping):
                value = build(nested, value)
        elif is_array and isinstance(value, list):
            value = tuple(value)
        elif ktype in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        kwargs[name] = value
    return cls(**kwargs)


def build_response(api_key: int, version: int, data: Mapping[str, Any]) -> Any:
    """Build the response dataclass of (api_key, version) from ``data``."""
    return build(response_class(api_key, version), data)
