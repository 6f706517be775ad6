"""Random Kafka request frames for fuzzing minikafka's request decoding and handlers.

Used by tests/minikafka/test_framecheck.py and integration_tests/minikafka_broker/test_fuzz.py.

Every frame is drawn from a seeded ``random.Random``, so a failure names the seed that
reproduces it. Kinds of frames (one per draw, see :func:`draw_frame`):

* ``typed``: a request of an API and version the broker supports, every field filled with a
  random value of its Kafka type (names from a small pool, so some hit real topics and groups);
* ``truncated``: a typed request cut short, its size prefix telling the truth;
* ``flipped``: a typed request with a few random bytes changed;
* ``garbage``: random bytes after a plausible request header;
* ``unknown_key`` / ``bad_version``: a header naming an API or a version the broker lacks;
* ``long_size`` / ``short_size``: a typed request whose size prefix is larger (the sender
  then closes) or smaller than the bytes that follow.

``expect`` says what the broker may do: answer (``"answer"``), close the connection
(``"close"``), or either (``"any"``).
"""

from __future__ import annotations

import datetime
import io
import random
import string
import struct
from dataclasses import dataclass, fields
from typing import Any

from kio.schema.request_header.v1 import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2 import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.serial._introspect import (  # kio's field introspection
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from minikafka._handlers import API_TABLE
from minikafka._protocol import request_class
from tests.minikafka.batches import make_batch

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint16": 16}
# Milliseconds drawn for timeouts: small ones mostly, so long polls and rebalances end soon.
_MILLIS = (0, 1, 10, 100, 500, 1000, 3000)
KINDS = (
    "typed",
    "typed",
    "typed",
    "truncated",
    "flipped",
    "garbage",
    "unknown_key",
    "bad_version",
    "long_size",
    "short_size",
)


@dataclass(frozen=True)
class Frame:
    """Bytes to send, what kind they are, and what the broker may do about them.

    ``api_key``, ``version`` and ``correlation_id`` are what the frame's header says after any
    mutation (a flipped byte may have changed them); -1 when the frame is too short to say.
    """

    kind: str
    api_key: int
    version: int
    correlation_id: int
    data: bytes
    expect: str
    close_after_send: bool = False


def _frame(kind: str, data: bytes, expect: str, *, close_after_send: bool = False) -> Frame:
    """A frame whose header fields are read back from the bytes that will be sent."""
    payload = data[4:]
    key = version = correlation_id = -1
    if len(payload) >= 8:
        key, version, correlation_id = struct.unpack_from(">hhi", payload)
    return Frame(kind, key, version, correlation_id, data, expect, close_after_send)


class Drawer:
    """Draws random field values; ``names`` are strings worth hitting (topics, groups, ids)."""

    def __init__(self, rng: random.Random, names: list[str]) -> None:
        self.rng = rng
        self.names = names

    def _int(self, kafka_type: str) -> int:
        bits = _INT_BITS[kafka_type]
        low, high = (
            (0, 2**bits - 1)
            if kafka_type == "uint16"
            else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        )
        pick = self.rng.random()
        if pick < 0.4:
            return self.rng.randint(max(low, -1), min(high, 5))
        if pick < 0.6:
            return self.rng.choice([low, high])
        return self.rng.randint(low, high)

    def _string(self) -> str:
        pick = self.rng.random()
        if pick < 0.6 and self.names:
            return self.rng.choice(self.names)
        if pick < 0.7:
            return ""
        length = self.rng.choice([1, 5, 20, 300])
        return "".join(self.rng.choice(string.printable) for _ in range(length))

    def _records(self) -> bytes | None:
        pick = self.rng.random()
        if pick < 0.1:
            return None
        if pick < 0.6:
            pid = self.rng.choice([-1, self.rng.randint(0, 2000)])
            return make_batch(
                [b"x" * self.rng.randint(0, 20)],
                producer_id=pid,
                epoch=0 if pid >= 0 else -1,
                base_sequence=self.rng.choice([-1, 0, 1]),
                transactional=self.rng.random() < 0.3,
            )
        return self.rng.randbytes(self.rng.randint(0, 80))

    def primitive(self, kafka_type: str) -> Any:
        """A random value of one Kafka primitive type."""
        if kafka_type in _INT_BITS:
            return self._int(kafka_type)
        if kafka_type == "bool":
            return self.rng.random() < 0.5
        if kafka_type == "string":
            return self._string()
        if kafka_type == "bytes":
            return self.rng.randbytes(self.rng.randint(0, 40))
        if kafka_type == "records":
            return self._records()
        if kafka_type == "timedelta_i32" or kafka_type == "timedelta_i64":
            return datetime.timedelta(milliseconds=self.rng.choice(_MILLIS))
        if kafka_type == "float64":
            return self.rng.random()
        msg = f"no random values for Kafka type {kafka_type!r}"
        raise ValueError(msg)

    def entity(self, cls: type[Any], depth: int = 0) -> Any:
        """A random instance of a kio request (or nested) dataclass."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            fc = classify_field(f)
            if isinstance(fc, EntityTupleField):
                count = self.rng.randint(0, 3 if depth < 2 else 1)
                kwargs[f.name] = tuple(self.entity(fc.type_, depth + 1) for _ in range(count))
            elif isinstance(fc, EntityField):
                kwargs[f.name] = self.entity(fc.type_, depth + 1)
            elif isinstance(fc, PrimitiveTupleField):
                if is_optional(f) and self.rng.random() < 0.2:
                    kwargs[f.name] = None
                else:
                    ktype = get_schema_field_type(f)
                    count = self.rng.randint(0, 3)
                    kwargs[f.name] = tuple(self.primitive(ktype) for _ in range(count))
            elif is_optional(f) and self.rng.random() < 0.2:
                kwargs[f.name] = None
            else:
                kwargs[f.name] = self.primitive(get_schema_field_type(f))
        return cls(**kwargs)


def typed_request(drawer: Drawer, api_key: int, version: int, correlation_id: int) -> bytes:
    """Header and body of a random, well-formed request of ``api_key`` at ``version``."""
    cls = request_class(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=drawer.rng.choice(["fuzz", None, ""]),
        ),
    )
    entity_writer(cls)(buf, drawer.entity(cls))
    return buf.getvalue()


def _sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def draw_frame(drawer: Drawer, correlation_id: int) -> Frame:
    """One random frame (see the module docstring)."""
    rng = drawer.rng
    kind = rng.choice(KINDS)
    spec = rng.choice(list(API_TABLE.values()))
    key = spec.api_key
    version = rng.randint(spec.min_version, spec.max_version)
    header = struct.pack(">hhi", key, version, correlation_id) + struct.pack(">h", 4) + b"fuzz"
    if kind == "unknown_key":
        key = rng.choice([k for k in range(-5, 100) if k not in API_TABLE])
        data = struct.pack(">hhi", key, 0, correlation_id) + rng.randbytes(rng.randint(0, 30))
        return _frame(kind, _sized(data), "close")
    if kind == "bad_version":
        version = rng.choice(
            [spec.min_version - 1 - rng.randint(0, 3), spec.max_version + 1 + rng.randint(0, 50)]
        )
        data = struct.pack(">hhi", key, version, correlation_id) + rng.randbytes(rng.randint(0, 30))
        expect = "answer" if key == 18 else "close"  # ApiVersions answers UNSUPPORTED_VERSION
        return _frame(kind, _sized(data), expect)
    if kind == "garbage":
        data = header + rng.randbytes(rng.randint(0, 60))
        return _frame(kind, _sized(data), "any")
    payload = typed_request(drawer, key, version, correlation_id)
    if kind == "typed":
        return _frame(kind, _sized(payload), "any")
    if kind == "truncated":
        cut = payload[: rng.randint(0, max(len(payload) - 1, 0))]
        return _frame(kind, _sized(cut), "any")
    if kind == "flipped":
        mutable = bytearray(payload)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(mutable))
            mutable[at] = rng.randrange(256)
        return _frame(kind, _sized(bytes(mutable)), "any")
    if kind == "long_size":
        data = struct.pack(">i", len(payload) + rng.randint(1, 1000)) + payload
        return _frame(kind, data, "close", close_after_send=True)
    # short_size: the broker decodes a prefix; the rest then reads as a frame of its own.
    short = rng.randint(0, max(len(payload) - 1, 0))
    data = struct.pack(">i", short) + payload
    return _frame(kind, data, "any")
