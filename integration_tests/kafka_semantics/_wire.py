"""A tiny raw Kafka wire client for what librdkafka cannot be made to do on purpose.

It speaks seven requests in their classic (non-flexible) encodings, which every Kafka broker
from 0.11 to 4.x accepts:

1. ApiVersions v0: what the broker advertises (used to skip tests of newer features);
2. InitProducerId (v0 or v1, same layout): an idempotent producer id and epoch;
3. Produce v3: one hand-built record batch (magic 2) with a chosen producer id, epoch and base
   sequence, so a test can send the very same batch twice, as a client retry would;
4. Fetch v4: raw record batches of one partition, control batches (transaction markers)
   included, with the high watermark, the last stable offset and, for read_committed, the
   aborted transactions the broker lists for the fetched range.
5. Metadata v1 (all topics) and SaslHandshake v1: how a secured listener answers a client
   that has not authenticated.
6. FindCoordinator v1: which node coordinates a group or transactional id (librdkafka
   does not say), and InitProducerId v1 with a transactional id: how a node that is not
   (or not yet) the coordinator answers.

Only the fields the tests read are decoded. Everything is big-endian per the Kafka protocol.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from dataclasses import dataclass

import crc32c

# Seconds to wait for one request/response round trip on a busy machine.
SOCKET_TIMEOUT_S = 30.0
# Seconds to keep retrying InitProducerId while the broker reports a retriable error.
INIT_PID_RETRY_S = 60.0

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_FIND_COORDINATOR = 10
API_SASL_HANDSHAKE = 17
API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22

# Error codes the tests compare against (Kafka protocol error table).
NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
# InitProducerId errors worth retrying: NOT_COORDINATOR-style start-up conditions.
_RETRIABLE_INIT = frozenset({7, 14, 15, 16})
# Fetch isolation levels and the attribute bits and control types of a record batch (magic 2).
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
_ATTR_COMPRESSION = 0x07
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # 61 bytes
# Milliseconds a raw fetch may wait on the broker (the tests fetch data that is there).
FETCH_MAX_WAIT_MS = 100
# Bytes a raw fetch asks for: far more than any test partition holds.
FETCH_MAX_BYTES = 8 * 1024 * 1024


class WireError(Exception):
    """The broker answered something this client cannot decode or did not expect."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if self._pos + size > len(self._data):
            raise WireError(f"response truncated at byte {self._pos}")
        out = struct.unpack_from(fmt, self._data, self._pos)
        self._pos += size
        return out

    def int16(self) -> int:
        return self.take(">h")[0]

    def int32(self) -> int:
        return self.take(">i")[0]

    def int64(self) -> int:
        return self.take(">q")[0]

    def string(self) -> str:
        length = self.int16()
        raw = self._data[self._pos : self._pos + max(length, 0)]
        self._pos += max(length, 0)
        return raw.decode()

    def nullable_bytes(self) -> bytes | None:
        length = self.int32()
        if length < 0:
            return None
        if self._pos + length > len(self._data):
            raise WireError(f"response truncated at byte {self._pos}")
        raw = self._data[self._pos : self._pos + length]
        self._pos += length
        return raw


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _record(offset_delta: int, value: bytes) -> bytes:
    body = (
        b"\x00"  # attributes
        + _varint(0)  # timestamp delta
        + _varint(offset_delta)
        + _varint(-1)  # null key
        + _varint(len(value))
        + value
        + _varint(0)  # no headers
    )
    return _varint(len(body)) + body


def record_batch(
    values: list[bytes], *, producer_id: int, producer_epoch: int, base_sequence: int
) -> bytes:
    """Encode a non-transactional, uncompressed magic-2 record batch."""
    now_ms = int(time.time() * 1000)
    records = b"".join(_record(i, v) for i, v in enumerate(values))
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            0,  # attributes: no compression, not transactional, not control
            len(values) - 1,  # last offset delta
            now_ms,  # base timestamp
            now_ms,  # max timestamp
            producer_id,
            producer_epoch,
            base_sequence,
            len(values),
        )
        + records
    )
    crc = crc32c.crc32c(after_crc)
    # batch length counts everything after the length field itself
    header_rest = struct.pack(">ibI", -1, 2, crc)  # partition leader epoch, magic, crc
    batch_length = len(header_rest) + len(after_crc)
    return struct.pack(">qi", 0, batch_length) + header_rest + after_crc


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = zigzag = 0
    while True:
        byte = data[pos]
        pos += 1
        zigzag |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (zigzag >> 1) ^ -(zigzag & 1), pos
        shift += 7


@dataclass(frozen=True)
class RawBatch:
    """One record batch as stored by the broker (only what the tests look at)."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    control: bool
    # Control batches: CONTROL_ABORT or CONTROL_COMMIT; data batches: None.
    control_type: int | None
    # Data batches without compression: (offset, value) per record.
    records: tuple[tuple[int, bytes | None], ...]


@dataclass(frozen=True)
class FetchResult:
    """The per-partition part of a Fetch v4 response."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    # (producer id, first offset) per aborted transaction; None when the broker sent null.
    aborted: tuple[tuple[int, int], ...] | None
    batches: tuple[RawBatch, ...]


def _records(data: bytes, base: int, count: int) -> tuple[tuple[int, bytes | None], ...]:
    out = []
    pos = _BATCH_HEADER.size
    for _ in range(count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        pos += 1  # record attributes
        _ts_delta, pos = _read_varint(data, pos)
        offset_delta, pos = _read_varint(data, pos)
        key_len, pos = _read_varint(data, pos)
        pos += max(key_len, 0)
        value_len, pos = _read_varint(data, pos)
        value = data[pos : pos + value_len] if value_len >= 0 else None
        out.append((base + offset_delta, value))
        pos = end
    return tuple(out)


def decode_batches(data: bytes) -> tuple[RawBatch, ...]:
    """Decode the complete magic-2 batches of a Fetch records field (a partial tail is dropped)."""
    batches = []
    pos = 0
    while pos + _BATCH_HEADER.size <= len(data):
        (
            base,
            length,
            _leader_epoch,
            magic,
            _crc,
            attrs,
            last_delta,
            _ts0,
            _ts1,
            producer_id,
            producer_epoch,
            _seq,
            count,
        ) = _BATCH_HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if end > len(data):
            break
        if magic != 2:
            raise WireError(f"batch at offset {base} has magic {magic}, expected 2")
        raw = data[pos:end]
        control = bool(attrs & _ATTR_CONTROL)
        control_type = None
        records: tuple[tuple[int, bytes | None], ...] = ()
        if control:
            # One record whose key is (version i16, type i16).
            _length, at = _read_varint(raw, _BATCH_HEADER.size)
            at += 1
            for _ in range(2):
                _value, at = _read_varint(raw, at)
            _key_len, at = _read_varint(raw, at)
            control_type = struct.unpack_from(">hh", raw, at)[1]
        elif not attrs & _ATTR_COMPRESSION:
            records = _records(raw, base, count)
        batches.append(
            RawBatch(
                base_offset=base,
                last_offset=base + last_delta,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional=bool(attrs & _ATTR_TRANSACTIONAL),
                control=control,
                control_type=control_type,
                records=records,
            )
        )
        pos = end
    return tuple(batches)


@dataclass(frozen=True)
class Coordinator:
    """A FindCoordinator answer: error code and the coordinator's node id and address."""

    error_code: int
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class ProduceResult:
    """The per-partition part of a Produce v3 response."""

    error_code: int
    base_offset: int


class WireClient:
    """One blocking connection to one broker (over TLS with ``tls``); use as a context manager."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=SOCKET_TIMEOUT_S)
        self._sock = sock if tls is None else tls.wrap_socket(sock, server_hostname=host)
        self._correlation = 0

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._sock.close()

    def _recv_exact(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._sock.recv(size - len(chunks))
            if not chunk:
                raise WireError("broker closed the connection")
            chunks += chunk
        return bytes(chunks)

    def request(self, api_key: int, api_version: int, body: bytes) -> _Reader:
        """Send one request with header v1 and return a reader positioned after header v0."""
        self._correlation += 1
        header = struct.pack(">hhi", api_key, api_version, self._correlation) + _string("wire")
        payload = header + body
        self._sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        reader = _Reader(self._recv_exact(size))
        if reader.int32() != self._correlation:
            raise WireError("correlation id mismatch")
        return reader

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """Return {api_key: (min_version, max_version)} as advertised by the broker."""
        reader = self.request(API_VERSIONS, 0, b"")
        error = reader.int16()
        if error != NONE:
            raise WireError(f"ApiVersions failed with error code {error}")
        versions: dict[int, tuple[int, int]] = {}
        for _ in range(reader.int32()):
            key, low, high = reader.take(">hhh")
            versions[key] = (low, high)
        return versions

    def metadata_broker_count(self) -> int:
        """Metadata v1 for all topics; return how many brokers the answer lists."""
        reader = self.request(API_METADATA, 1, struct.pack(">i", -1))
        return reader.int32()

    def sasl_handshake(self, mechanism: str) -> tuple[int, list[str]]:
        """SaslHandshake v1: return (error code, the mechanisms the listener enables)."""
        reader = self.request(API_SASL_HANDSHAKE, 1, _string(mechanism))
        error = reader.int16()
        return error, [reader.string() for _ in range(reader.int32())]

    def init_producer_id(self, version: int) -> tuple[int, int]:
        """Return (producer id, epoch) for a non-transactional idempotent producer."""
        deadline = time.monotonic() + INIT_PID_RETRY_S
        while True:
            reader = self.request(
                API_INIT_PRODUCER_ID, version, _string(None) + struct.pack(">i", -1)
            )
            reader.int32()  # throttle time
            error = reader.int16()
            producer_id, epoch = reader.int64(), reader.int16()
            if error == NONE:
                return producer_id, epoch
            if error not in _RETRIABLE_INIT or time.monotonic() > deadline:
                raise WireError(f"InitProducerId failed with error code {error}")
            time.sleep(0.5)

    def find_coordinator(self, key: str, key_type: int) -> Coordinator:
        """FindCoordinator v1 for a group (key type 0) or transactional id (1)."""
        reader = self.request(API_FIND_COORDINATOR, 1, _string(key) + struct.pack(">b", key_type))
        reader.int32()  # throttle time
        error = reader.int16()
        reader.string()  # error message (null reads as "")
        node_id = reader.int32()
        return Coordinator(error, node_id, reader.string(), reader.int32())

    def init_transactional_id(self, transactional_id: str, timeout_ms: int) -> int:
        """InitProducerId v1 for a transactional id, once; return the error code."""
        body = _string(transactional_id) + struct.pack(">i", timeout_ms)
        reader = self.request(API_INIT_PRODUCER_ID, 1, body)
        reader.int32()  # throttle time
        return reader.int16()

    def produce(self, topic: str, partition: int, batch: bytes) -> ProduceResult:
        """Send one batch with acks=all via Produce v3 and return the partition's result."""
        body = (
            _string(None)  # transactional id
            + struct.pack(">hi", -1, int(SOCKET_TIMEOUT_S * 1000))  # acks=all, timeout
            + struct.pack(">i", 1)
            + _string(topic)
            + struct.pack(">i", 1)
            + struct.pack(">ii", partition, len(batch))
            + batch
        )
        reader = self.request(API_PRODUCE, 3, body)
        results: list[ProduceResult] = []
        for _ in range(reader.int32()):
            reader.string()
            for _ in range(reader.int32()):
                reader.int32()  # partition index
                error = reader.int16()
                base_offset = reader.int64()
                reader.int64()  # log append time
                results.append(ProduceResult(error, base_offset))
        if len(results) != 1:
            raise WireError(f"expected one partition result, got {len(results)}")
        return results[0]

    def fetch(self, topic: str, partition: int, offset: int, isolation_level: int) -> FetchResult:
        """Fetch one partition from ``offset`` with Fetch v4 and decode what came back."""
        body = (
            struct.pack(">iiiib", -1, FETCH_MAX_WAIT_MS, 0, FETCH_MAX_BYTES, isolation_level)
            + struct.pack(">i", 1)
            + _string(topic)
            + struct.pack(">i", 1)
            + struct.pack(">iqi", partition, offset, FETCH_MAX_BYTES)
        )
        reader = self.request(API_FETCH, 4, body)
        reader.int32()  # throttle time
        results: list[FetchResult] = []
        for _ in range(reader.int32()):
            reader.string()
            for _ in range(reader.int32()):
                reader.int32()  # partition index
                error = reader.int16()
                high_watermark, last_stable = reader.int64(), reader.int64()
                count = reader.int32()
                aborted = (
                    None
                    if count < 0
                    else tuple((reader.int64(), reader.int64()) for _ in range(count))
                )
                records = reader.nullable_bytes() or b""
                batches = decode_batches(records)
                results.append(FetchResult(error, high_watermark, last_stable, aborted, batches))
        if len(results) != 1:
            raise WireError(f"expected one partition result, got {len(results)}")
        return results[0]
