"""Bounds check of a request frame before kio decodes it.

Why: kio's native reader reserves memory for an array from the element count on the wire, so
a frame claiming 2**31 elements makes it ask for ~100 GB and the process aborts (found by
fuzzing). Kafka's own generated readers refuse an array longer than the bytes that remain;
this walk applies the same rule to every array, string and byte field, and to the tagged-field
sections of flexible versions, without building any object.

Contract: :func:`check_frame` returns when every length fits the frame and no non-nullable
array, string or byte field is null (Kafka refuses both), and raises
:class:`~minikafka._errors.ProtocolError` otherwise. It checks sizes and nulls only; kio still
validates the rest (and may still refuse the frame).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from kio.serial._introspect import (  # kio's public field introspection
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from ._errors import ProtocolError

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "int64": 8,
    "float64": 8,
    "uuid": 16,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "error_code": 2,
}
_SIZED = {"string": 2, "bytes": 4, "records": 4}  # width of the non-flexible length prefix
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# Bytes before the client id of every request header (api key, version, correlation id).
_HEADER_FIXED = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class _Field:
    kind: str  # "fixed", "sized", "entity", "entities", "primitives"
    size: int  # fixed size, or non-flexible length-prefix width
    ktype: str
    nested: _Plan | None
    name: str = ""
    nullable: bool = True


@dataclass(frozen=True, slots=True)
class _Plan:
    fields: tuple[_Field, ...]
    min_size: int  # smallest encoding of one instance (at least 1)


class _Cursor:
    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, pos: int, flexible: bool) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def advance(self, size: int) -> None:
        if size < 0 or size > self.remaining():
            msg = f"field of {size} bytes at byte {self.pos} runs past the end of the frame"
            raise ProtocolError(msg)
        self.pos += size

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                msg = f"bad unsigned varint at byte {self.pos}"
                raise ProtocolError(msg)
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def length(self, width: int) -> int:
        """Read a length prefix (-1: null), compact in flexible versions."""
        if self.flexible:
            return self.uvarint() - 1
        self.advance(width)
        layout = _I16 if width == 2 else _I32
        return int(layout.unpack_from(self.data, self.pos - width)[0])

    def tagged_fields(self) -> None:
        """Skip a tagged-field section (count, then tag, size and data per field)."""
        n = self.uvarint()
        self._fits(n, 2)
        for _ in range(n):
            self.uvarint()
            self.advance(self.uvarint())

    def count(self, min_size: int) -> int:
        """Read an array's element count (-1: null), which must fit the rest of the frame."""
        n = self.length(4)
        self._fits(n, min_size)
        return n

    def _fits(self, n: int, min_size: int) -> None:
        if n > 0 and n * min_size > self.remaining():
            msg = (
                f"{n} elements of at least {min_size} bytes at byte {self.pos} exceed the "
                f"{self.remaining()} bytes left in the frame"
            )
            raise ProtocolError(msg)


@cache
def _plan(cls: Any, flexible: bool) -> _Plan:
    out: list[_Field] = []
    min_size = 1 if flexible else 0  # the tagged-field count of a flexible struct
    for f in fields(cls):
        fc = classify_field(f)
        if isinstance(fc, EntityTupleField | EntityField):
            nested = _plan(fc.type_, flexible)
            kind = "entities" if isinstance(fc, EntityTupleField) else "entity"
            out.append(
                _Field(
                    kind=kind, size=4, ktype="", nested=nested, name=f.name, nullable=is_optional(f)
                )
            )
            min_size += (1 if flexible else 4) if kind == "entities" else nested.min_size
            continue
        ktype = get_schema_field_type(f)
        if isinstance(fc, PrimitiveTupleField):
            out.append(
                _Field(
                    kind="primitives",
                    size=4,
                    ktype=ktype,
                    nested=None,
                    name=f.name,
                    nullable=is_optional(f),
                )
            )
            min_size += 1 if flexible else 4
        elif ktype in _FIXED:
            size = _FIXED[ktype]
            if out and out[-1].kind == "fixed":  # one step for a run of fixed-size fields
                size += out.pop().size
            out.append(_Field(kind="fixed", size=size, ktype="", nested=None))
            min_size += _FIXED[ktype]
        else:
            width = _SIZED[ktype]
            out.append(
                _Field(
                    kind="sized",
                    size=width,
                    ktype=ktype,
                    nested=None,
                    name=f.name,
                    nullable=is_optional(f),
                )
            )
            min_size += 1 if flexible else width
    return _Plan(tuple(out), max(min_size, 1))


def _element_size(ktype: str, flexible: bool) -> int:
    if ktype in _FIXED:
        return _FIXED[ktype]
    return 1 if flexible else _SIZED[ktype]


def _not_null(f: _Field, n: int, cur: _Cursor) -> int:
    if n < 0 and not f.nullable:
        msg = f"non-nullable field {f.name} is null at byte {cur.pos}"
        raise ProtocolError(msg)
    return max(n, 0)


def _walk(cur: _Cursor, plan: _Plan) -> None:
    for f in plan.fields:
        if f.kind == "fixed":
            cur.advance(f.size)
        elif f.kind == "sized":
            cur.advance(_not_null(f, cur.length(f.size), cur))
        elif f.kind == "entity":
            assert f.nested is not None  # noqa: S101 - set for entity fields
            _walk(cur, f.nested)
        elif f.kind == "entities":
            assert f.nested is not None  # noqa: S101
            for _ in range(_not_null(f, cur.count(f.nested.min_size), cur)):
                _walk(cur, f.nested)
        else:
            size = _element_size(f.ktype, cur.flexible)
            n = _not_null(f, cur.count(size), cur)
            if f.ktype in _FIXED:
                cur.advance(n * size)
            else:
                for _ in range(n):
                    cur.advance(max(cur.length(_SIZED[f.ktype]), 0))
    if cur.flexible:
        cur.tagged_fields()


def check_frame(frame: bytes, request_cls: Any) -> None:
    """Raise ProtocolError unless every length in ``frame`` fits (see the module docstring)."""
    flexible = bool(request_cls.__flexible__)
    header = _Cursor(frame, _HEADER_FIXED, flexible=False)
    header.advance(max(header.length(2), 0))  # client id: a classic string in every header
    cur = _Cursor(frame, header.pos, flexible)
    if flexible:
        cur.tagged_fields()
    _walk(cur, _plan(request_cls, flexible))
