"""Record batch v2 header handling: parse, validate, re-offset, build control batches.

Only the 61-byte batch header is parsed; record payloads stay opaque bytes so the
produce and fetch paths do no per-record Python work.

Layout of the header (big endian)::

    0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8
    17 crc u32 | 21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64
    35 maxTimestamp i64 | 43 producerId i64 | 51 producerEpoch i16
    53 baseSequence i32 | 57 recordCount i32 | 61 records...

The CRC32C covers bytes 21..end, so rewriting baseOffset and partitionLeaderEpoch
never invalidates it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
from kio.schema.errors import ErrorCode

from ._errors import KafkaProtocolError

HEADER_SIZE = 61
# Bytes before the CRC-covered region (baseOffset .. crc).
_CRC_START = 21
_LENGTH_PREFIX = 12  # baseOffset + batchLength
_HEADER = struct.Struct(">qiibIhiqqqhii")
ATTR_COMPRESSION_MASK = 0x07
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
NO_PRODUCER_ID = -1
CONTROL_ABORT = 0
CONTROL_COMMIT = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchHeader:
    """The parsed header fields of one record batch."""

    base_offset: int
    length: int  # total bytes of the batch including the 12-byte prefix
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def is_transactional(self) -> bool:
        """Whether the batch belongs to a transaction."""
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        """Whether the batch is a control (commit/abort marker) batch."""
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record (wraps at int32 max like Kafka)."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``pos`` without validating the CRC."""
    if len(buf) - pos < HEADER_SIZE:
        msg = f"record batch truncated: {len(buf) - pos} bytes < header"
        raise KafkaProtocolError(ErrorCode.corrupt_message, msg)
    (base, blen, _lep, magic, _crc, attrs, lod, bts, mts, pid, pepoch, bseq, count) = (
        _HEADER.unpack_from(buf, pos)
    )
    if magic != 2:
        msg = f"unsupported record batch magic {magic}; only v2 is accepted"
        raise KafkaProtocolError(ErrorCode.corrupt_message, msg)
    if blen < HEADER_SIZE - _LENGTH_PREFIX:
        msg = f"record batch length {blen} is smaller than its header"
        raise KafkaProtocolError(ErrorCode.corrupt_message, msg)
    return BatchHeader(
        base_offset=base,
        length=blen + _LENGTH_PREFIX,
        attributes=attrs,
        last_offset_delta=lod,
        base_timestamp=bts,
        max_timestamp=mts,
        producer_id=pid,
        producer_epoch=pepoch,
        base_sequence=bseq,
        record_count=count,
    )


def split_batches(records: bytes, *, check_crc: bool = True) -> list[tuple[BatchHeader, bytes]]:
    """Split a produce request's records field into (header, raw bytes) per batch.

    Raises:
        KafkaProtocolError: ``corrupt_message``, a batch is truncated, not magic v2, or
            fails its CRC32C.

    """
    out: list[tuple[BatchHeader, bytes]] = []
    pos = 0
    end = len(records)
    view = memoryview(records)
    while pos < end:
        hdr = parse_header(records, pos)
        if pos + hdr.length > end:
            msg = "record batch extends past the end of the records field"
            raise KafkaProtocolError(ErrorCode.corrupt_message, msg)
        if hdr.last_offset_delta < 0 or hdr.record_count < 0:
            msg = "record batch has a negative record count"
            raise KafkaProtocolError(ErrorCode.corrupt_message, msg)
        if check_crc:
            (stored,) = struct.unpack_from(">I", records, pos + 17)
            actual = crc32c.crc32c(view[pos + _CRC_START : pos + hdr.length])
            if stored != actual:
                msg = f"record batch CRC32C mismatch (stored {stored:#x}, computed {actual:#x})"
                raise KafkaProtocolError(ErrorCode.corrupt_message, msg)
        out.append((hdr, bytes(view[pos : pos + hdr.length])))
        pos += hdr.length
    return out


def with_base_offset(raw: bytes, base_offset: int, leader_epoch: int = 0) -> bytes:
    """Return ``raw`` with baseOffset and partitionLeaderEpoch rewritten (CRC unaffected)."""
    buf = bytearray(raw)
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    return bytes(buf)


def _varint(value: int) -> bytes:
    """Zig-zag varint encoding used inside records."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def build_control_batch(
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    timestamp_ms: int,
    coordinator_epoch: int = 0,
) -> bytes:
    """Build a transaction marker (control batch holding one control record)."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = (
        b"\x00"  # record attributes
        + _varint(0)  # timestamp delta
        + _varint(0)  # offset delta
        + _varint(len(key))
        + key
        + _varint(len(value))
        + value
        + _varint(0)  # header count
    )
    record = _varint(len(body)) + body
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            ATTR_TRANSACTIONAL | ATTR_CONTROL,
            0,
            timestamp_ms,
            timestamp_ms,
            producer_id,
            producer_epoch,
            -1,
            1,
        )
        + record
    )
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leaderEpoch + magic + crc + rest
    return struct.pack(">qiibI", base_offset, batch_length, 0, 2, crc) + after_crc


def control_type(raw: bytes) -> int | None:
    """Return CONTROL_COMMIT / CONTROL_ABORT for a control batch, None if unreadable."""
    pos = HEADER_SIZE
    # record: length varint, attributes byte, ts delta varint, offset delta varint,
    # key length varint, key (version i16, type i16)
    try:
        for _ in range(1):
            pos = _skip_varint(raw, pos)
        pos += 1
        pos = _skip_varint(raw, pos)
        pos = _skip_varint(raw, pos)
        pos = _skip_varint(raw, pos)
        (_version, ctype) = struct.unpack_from(">hh", raw, pos)
    except (IndexError, struct.error):
        return None
    return int(ctype)


def _skip_varint(raw: bytes, pos: int) -> int:
    while raw[pos] & 0x80:
        pos += 1
    return pos + 1


def record_timestamps(raw: bytes, hdr: BatchHeader) -> list[tuple[int, int]] | None:
    """Return (offset, timestamp) per record of an uncompressed batch, None if compressed."""
    if hdr.attributes & ATTR_COMPRESSION_MASK:
        return None
    out: list[tuple[int, int]] = []
    pos = HEADER_SIZE
    try:
        for _ in range(hdr.record_count):
            length, pos2 = _read_varint(raw, pos)
            p = pos2 + 1
            ts_delta, p = _read_varint(raw, p)
            off_delta, p = _read_varint(raw, p)
            out.append((hdr.base_offset + off_delta, hdr.base_timestamp + ts_delta))
            pos = pos2 + length
    except IndexError:
        return None
    return out


def _read_varint(raw: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    z = 0
    while True:
        b = raw[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (z >> 1) ^ -(z & 1), pos
