import struct

import pytest
from kio.schema.errors import ErrorCode

from minikafka._errors import KafkaProtocolError
from minikafka._records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    build_control_batch,
    control_type,
    parse_header,
    record_timestamps,
    split_batches,
    with_base_offset,
)
from tests.minikafka.batches import make_batch


def test_parse_header_fields():
    raw = make_batch(
        [b"a", b"b", b"c"], producer_id=7, epoch=2, base_sequence=5, transactional=True
    )
    hdr = parse_header(raw)
    assert hdr.length == len(raw)
    assert hdr.record_count == 3
    assert hdr.last_offset_delta == 2
    assert (hdr.producer_id, hdr.producer_epoch, hdr.base_sequence) == (7, 2, 5)
    assert hdr.last_sequence == 7
    assert hdr.is_transactional and not hdr.is_control
    assert hdr.max_timestamp == 1_020


def test_split_multiple_batches():
    a, b = make_batch([b"1"]), make_batch([b"2", b"3"])
    parts = split_batches(a + b)
    assert [raw for _, raw in parts] == [a, b]


def test_crc_mismatch_rejected():
    raw = bytearray(make_batch([b"hello"]))
    raw[-2] ^= 0xFF
    with pytest.raises(
        KafkaProtocolError, check=lambda e: e.error_code is ErrorCode.corrupt_message
    ) as info:
        split_batches(bytes(raw))
    assert info.value.error_code == ErrorCode.corrupt_message


def test_truncated_and_bad_magic_rejected():
    raw = make_batch([b"hello"])
    with pytest.raises(
        KafkaProtocolError, check=lambda e: e.error_code is ErrorCode.corrupt_message
    ):
        split_batches(raw[:-1])
    bad = bytearray(raw)
    bad[16] = 1
    with pytest.raises(
        KafkaProtocolError, match="magic", check=lambda e: e.error_code is ErrorCode.corrupt_message
    ):
        split_batches(bytes(bad))


def test_rewriting_base_offset_keeps_crc_valid():
    raw = with_base_offset(make_batch([b"x"]), 12345)
    assert struct.unpack_from(">q", raw, 0)[0] == 12345
    split_batches(raw)  # CRC still verifies


def test_control_batch_roundtrip():
    raw = build_control_batch(
        base_offset=9, producer_id=3, producer_epoch=1, commit=True, timestamp_ms=5
    )
    ((hdr, _),) = split_batches(raw)
    assert hdr.is_control and hdr.is_transactional and hdr.base_offset == 9
    assert control_type(raw) == CONTROL_COMMIT
    abort = build_control_batch(
        base_offset=0, producer_id=3, producer_epoch=1, commit=False, timestamp_ms=5
    )
    assert control_type(abort) == CONTROL_ABORT


def test_record_timestamps():
    raw = with_base_offset(make_batch([b"a", b"b"], base_timestamp=100, ts_step=5), 10)
    assert record_timestamps(raw, parse_header(raw)) == [(10, 100), (11, 105)]
