import pytest
from kio.schema.errors import ErrorCode

from minikafka._errors import KafkaProtocolError
from minikafka._log import PartitionLog
from minikafka._records import parse_header, split_batches
from tests.minikafka.batches import make_batch


def _log(tmp_path=None):
    path = tmp_path / "0.log" if tmp_path is not None else None
    return PartitionLog("t", 0, path, "commit")


def _append(plog, raw):
    return plog.append(split_batches(raw))


def _offsets(data: bytes) -> list[int]:
    return [hdr.base_offset for hdr, _ in split_batches(data)]


def test_offsets_assigned_sequentially():
    plog = _log()
    assert _append(plog, make_batch([b"a", b"b"])) == 0
    assert _append(plog, make_batch([b"c"])) == 2
    assert plog.high_watermark == 3 == plog.lso
    assert _offsets(plog.read(0, 1 << 20, plog.high_watermark)) == [0, 2]


def test_read_starts_at_containing_batch_and_respects_max_bytes():
    plog = _log()
    for i in range(5):
        _append(plog, make_batch([b"v%d" % i, b"w"]))
    assert _offsets(plog.read(3, 1 << 20, 10)) == [2, 4, 6, 8]
    one = len(make_batch([b"v0", b"w"]))
    assert _offsets(plog.read(0, one * 2, 10)) == [0, 2]
    # a batch larger than max_bytes is still returned alone (KIP-74)
    assert _offsets(plog.read(0, 1, 10)) == [0]
    assert plog.read(10, 1 << 20, 10) == b""
    assert _offsets(plog.read(0, 1 << 20, 4)) == [0, 2]


def test_idempotent_duplicate_returns_original_offset():
    plog = _log()
    first = make_batch([b"a", b"b"], producer_id=1, epoch=0, base_sequence=0)
    assert _append(plog, first) == 0
    assert _append(plog, make_batch([b"c"], producer_id=1, epoch=0, base_sequence=2)) == 2
    assert _append(plog, first) == 0  # duplicate, not stored again
    assert plog.high_watermark == 3


def test_out_of_order_sequence_rejected():
    plog = _log()
    _append(plog, make_batch([b"a"], producer_id=1, epoch=0, base_sequence=0))
    with pytest.raises(KafkaProtocolError) as info:
        _append(plog, make_batch([b"b"], producer_id=1, epoch=0, base_sequence=5))
    assert info.value.error_code == ErrorCode.out_of_order_sequence_number
    assert plog.high_watermark == 1


def test_old_epoch_rejected_and_new_epoch_must_start_at_zero():
    plog = _log()
    _append(plog, make_batch([b"a"], producer_id=1, epoch=3, base_sequence=0))
    with pytest.raises(KafkaProtocolError) as info:
        _append(plog, make_batch([b"b"], producer_id=1, epoch=2, base_sequence=1))
    assert info.value.error_code == ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaProtocolError) as info:
        _append(plog, make_batch([b"b"], producer_id=1, epoch=4, base_sequence=1))
    assert info.value.error_code == ErrorCode.out_of_order_sequence_number
    assert _append(plog, make_batch([b"b"], producer_id=1, epoch=4, base_sequence=0)) == 1


def test_lso_and_aborted_index():
    plog = _log()
    _append(plog, make_batch([b"plain"]))
    _append(
        plog,
        make_batch([b"t1", b"t2"], producer_id=5, epoch=0, base_sequence=0, transactional=True),
    )
    assert plog.lso == 1 and plog.high_watermark == 3
    _append(plog, make_batch([b"t3"], producer_id=6, epoch=0, base_sequence=0, transactional=True))
    marker = plog.append_marker(5, 0, commit=False, now_ms=0)
    assert marker == 4
    assert plog.lso == 3  # producer 6 still open
    plog.append_marker(6, 0, commit=True, now_ms=0)
    assert plog.lso == plog.high_watermark == 6
    aborted = plog.aborted_in_range(0, 6)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(5, 1, 4)]
    assert plog.aborted_in_range(5, 6) == []
    # read_committed readers stop at the LSO
    _append(plog, make_batch([b"t4"], producer_id=7, epoch=0, base_sequence=0, transactional=True))
    assert _offsets(plog.read(0, 1 << 20, plog.lso))[-1] == 5


def test_marker_with_bumped_epoch_fences_old_epoch():
    plog = _log()
    _append(plog, make_batch([b"t"], producer_id=5, epoch=0, base_sequence=0, transactional=True))
    plog.append_marker(5, 1, commit=False, now_ms=0)
    with pytest.raises(KafkaProtocolError) as info:
        _append(
            plog, make_batch([b"late"], producer_id=5, epoch=0, base_sequence=1, transactional=True)
        )
    assert info.value.error_code == ErrorCode.invalid_producer_epoch


def test_persistence_reload_rebuilds_state(tmp_path):
    plog = _log(tmp_path)
    _append(plog, make_batch([b"a"], producer_id=1, epoch=0, base_sequence=0))
    _append(plog, make_batch([b"t"], producer_id=2, epoch=0, base_sequence=0, transactional=True))
    plog.append_marker(2, 0, commit=False, now_ms=0)
    _append(
        plog, make_batch([b"open"], producer_id=3, epoch=0, base_sequence=0, transactional=True)
    )
    data = plog.read(0, 1 << 20, plog.high_watermark)
    plog.close()
    again = _log(tmp_path)
    assert again.high_watermark == 4 and again.lso == 3
    assert again.read(0, 1 << 20, again.high_watermark) == data
    assert [(a.producer_id, a.first_offset) for a in again.aborted_in_range(0, 4)] == [(2, 1)]
    # producer 1's sequence state survived: a retry is a duplicate, a gap is rejected
    assert _append(again, make_batch([b"a"], producer_id=1, epoch=0, base_sequence=0)) == 0
    with pytest.raises(KafkaProtocolError):
        _append(again, make_batch([b"x"], producer_id=1, epoch=0, base_sequence=3))


def test_torn_tail_is_truncated_on_reload(tmp_path):
    plog = _log(tmp_path)
    _append(plog, make_batch([b"a"]))
    _append(plog, make_batch([b"b"]))
    plog.close()
    path = tmp_path / "0.log"
    size = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(make_batch([b"partial"])[:20])
    again = _log(tmp_path)
    assert again.high_watermark == 2
    assert path.stat().st_size == size
    assert parse_header(again.read(1, 1 << 20, 2)).base_offset == 1


def test_offset_for_timestamp():
    plog = _log()
    _append(plog, make_batch([b"a", b"b"], base_timestamp=100, ts_step=10))
    _append(plog, make_batch([b"c"], base_timestamp=200))
    assert plog.offset_for_timestamp(105) == (1, 110)
    assert plog.offset_for_timestamp(150) == (2, 200)
    assert plog.offset_for_timestamp(500) is None


def test_max_timestamp_offset():
    plog = _log()
    assert plog.max_timestamp_offset() is None
    _append(plog, make_batch([b"a", b"b"], base_timestamp=100, ts_step=50))
    _append(plog, make_batch([b"c"], base_timestamp=120))
    assert plog.max_timestamp_offset() == (1, 150)
