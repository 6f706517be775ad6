"""Build record batch v2 bytes for unit tests (independent of minikafka's parser)."""

from __future__ import annotations

import struct

import crc32c


def _varint(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = b"\x00" + _varint(ts_delta) + _varint(offset_delta)
    body += _varint(-1) if key is None else _varint(len(key)) + key
    body += _varint(-1) if value is None else _varint(len(value)) + value
    body += _varint(0)
    return _varint(len(body)) + body


def make_batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    base_timestamp: int = 1_000,
    ts_step: int = 10,
) -> bytes:
    """A valid uncompressed batch with base offset 0 holding ``values`` as records."""
    records = b"".join(_record(i, i * ts_step, b"k%d" % i, v) for i, v in enumerate(values))
    attrs = 0x10 if transactional else 0
    n = len(values)
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attrs,
            n - 1,
            base_timestamp,
            base_timestamp + (n - 1) * ts_step,
            producer_id,
            epoch,
            base_sequence,
            n,
        )
        + records
    )
    length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", 0, length, -1, 2, crc32c.crc32c(after_crc)) + after_crc
