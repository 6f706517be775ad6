"""Garbage, oversize frames and unknown versions never hurt other clients."""

from __future__ import annotations

import socket
import struct

from confluent_kafka import Producer
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from .conftest import CLIENT_TIMEOUT_S
from .helpers import read_all

# Seconds a raw socket waits for the broker to answer or close.
SOCKET_TIMEOUT_S = 10.0


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
    return sock


def _recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _frame(api_key: int, version: int, corr: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, corr, -1) + body
    return struct.pack(">i", len(payload)) + payload


def _producer_works(bootstrap: str, producer: Producer, topic: str, value: bytes) -> None:
    producer.produce(topic, value)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def test_garbage_and_oversize_frames_close_only_that_connection(embedded, topic_factory):
    bs = embedded.bootstrap_servers
    topic = topic_factory(bs)
    producer = Producer({"bootstrap.servers": bs})
    _producer_works(bs, producer, topic, b"one")
    for payload in (
        struct.pack(">i", 2**31 - 1) + b"x" * 10,  # oversize frame
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 3) + b"abc",  # shorter than a header
        _frame(99, 0, 1),  # unknown api key
        _frame(0, 99, 2),  # unsupported Produce version
        _frame(3, 8, 3, b"\xff\xff\xff\x7f"),  # Metadata body that does not decode
    ):
        sock = _connect(bs)
        sock.sendall(payload)
        assert _recv_all(sock) == b""  # closed without an answer
        sock.close()
    _producer_works(bs, producer, topic, b"two")
    assert read_all(bs, topic) == [b"one", b"two"]


def test_unknown_api_versions_version_gets_unsupported_version(embedded):
    sock = _connect(embedded.bootstrap_servers)
    sock.sendall(_frame(18, 42, 77))
    size = struct.unpack(">i", sock.recv(4))[0]
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    sock.close()
    assert struct.unpack(">i", data[:4])[0] == 77
    resp, _ = entity_reader(ApiVersionsResponse)(data, 4)
    assert resp.error_code == ErrorCode.unsupported_version
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert 0 in keys and 1 in keys and 18 in keys


def test_corrupt_batch_is_rejected_with_corrupt_message(embedded, topic_factory):
    import datetime
    import io

    from kio.schema.produce.v8.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.schema.produce.v8.response import ProduceResponse
    from kio.schema.request_header.v1 import RequestHeader
    from kio.serial import entity_writer

    from tests.minikafka.batches import make_batch

    bs = embedded.bootstrap_servers
    topic = topic_factory(bs)
    bad = bytearray(make_batch([b"payload"]))
    bad[-3] ^= 0x55
    req = ProduceRequest(
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=bytes(bad)),)
            ),
        ),
    )
    buf = io.BytesIO()
    entity_writer(RequestHeader)(
        buf,
        RequestHeader(request_api_key=0, request_api_version=8, correlation_id=5, client_id="raw"),
    )
    entity_writer(ProduceRequest)(buf, req)
    sock = _connect(bs)
    sock.sendall(struct.pack(">i", len(buf.getvalue())) + buf.getvalue())
    size = struct.unpack(">i", sock.recv(4))[0]
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    sock.close()
    resp, _ = entity_reader(ProduceResponse)(data, 4)
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.corrupt_message
    assert read_all(bs, topic, committed=False) == []
