"""RequestCounter: names, snapshots, reset, and the stats frame codec."""

import struct

from minikafka._stats import (
    REJECTED,
    STATS_API_KEY,
    RequestCounter,
    api_name,
    encode_stats_response,
    stats_reset_requested,
)


def test_api_names_follow_kafka_spelling():
    assert api_name(0) == "Produce"
    assert api_name(22) == "InitProducerId"
    assert api_name(24) == "AddPartitionsToTxn"
    assert api_name(28) == "TxnOffsetCommit"
    assert api_name(18) == "ApiVersions"
    assert api_name(999) == "api-999"


def test_counts_snapshot_and_reset():
    counter = RequestCounter()
    assert counter.snapshot() == {}
    for key in (0, 0, 26, 1):
        counter.count(key)
    counter.reject()
    before = counter.snapshot()
    assert before == {"Produce": 2, "Fetch": 1, "EndTxn": 1, REJECTED: 1}
    counter.count(0)
    assert before["Produce"] == 2, "a snapshot is a copy"
    counter.reset()
    assert counter.snapshot() == {}


def test_stats_frame_flags_and_answer():
    def frame(client: bytes | None, flags: bytes) -> bytes:
        head = struct.pack(">hhi", STATS_API_KEY, 0, 9)
        name = struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
        return head + name + flags

    assert stats_reset_requested(frame(None, b"\x01"))
    assert stats_reset_requested(frame(b"bench", b"\x01"))
    assert not stats_reset_requested(frame(b"bench", b"\x00"))
    assert not stats_reset_requested(frame(b"bench", b""))
    assert not stats_reset_requested(b"\x00")
    answer = encode_stats_response(9, {"Produce": 3})
    size, corr, length = struct.unpack_from(">iii", answer)
    assert (size, corr) == (len(answer) - 4, 9)
    assert answer[12:] == b'{"Produce": 3}' and length == len(answer) - 12
