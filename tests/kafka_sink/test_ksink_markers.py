import pytest

from connectors.kafka import KafkaConnectorError
from connectors.kafka._sink._markers import decode_marker, encode_marker
from txn import Marker


def test_marker_round_trip_and_layout():
    marker = Marker(epoch=41, rows=1234, checksum="u00ff00ff00ff00ff")
    offset, meta = encode_marker(marker)
    assert offset == 42  # offset = epoch + 1
    assert meta == '{"epoch":41,"rows":1234,"checksum":"u00ff00ff00ff00ff"}'  # compact JSON
    assert decode_marker(offset, meta) == marker


def test_epoch_zero_is_offset_one():
    assert encode_marker(Marker(0, 0, "u0"))[0] == 1


@pytest.mark.parametrize("offset", [-1001, -1])
def test_no_committed_offset_means_no_marker(offset):
    assert decode_marker(offset, None) is None


@pytest.mark.parametrize(
    "meta", [None, "", "not json", '{"epoch": 1}', '{"epoch":"x","rows":1,"checksum":"c"}']
)
def test_foreign_offsets_are_reported(meta):
    with pytest.raises(KafkaConnectorError, match="sink_id"):
        decode_marker(2, meta)


def test_offset_must_agree_with_epoch():
    _, meta = encode_marker(Marker(5, 1, "c"))
    with pytest.raises(KafkaConnectorError, match="disagrees"):
        decode_marker(9, meta)
