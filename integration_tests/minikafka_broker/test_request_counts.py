"""Per-API request counters: what a benchmark reads to count broker round trips."""

from __future__ import annotations

import socket
import struct

from confluent_kafka import Producer

from minikafka import BrokerProcess
from minikafka._stats import request_counts

from .conftest import CLIENT_TIMEOUT_S


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def test_counts_show_the_requests_of_one_transaction(embedded, topic_factory):
    bs = embedded.bootstrap_servers
    topic = topic_factory(bs)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": "counted", "linger.ms": 0})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    assert embedded.request_counts()["InitProducerId"] == 1
    # A first transaction lets the producer's start-up metadata requests settle.
    producer.begin_transaction()
    producer.produce(topic, b"warm-up")
    producer.flush(CLIENT_TIMEOUT_S)
    producer.commit_transaction(CLIENT_TIMEOUT_S)

    before = embedded.request_counts()
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, b"v%d" % i)
    producer.flush(CLIENT_TIMEOUT_S)
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    spent = _diff(embedded.request_counts(), before)

    assert spent.get("AddPartitionsToTxn") == 1, spent
    assert spent.get("EndTxn") == 1, spent
    assert spent.get("Produce", 0) >= 1, spent
    assert "InitProducerId" not in spent and "rejected" not in spent, spent


def test_refused_frames_count_as_rejected_and_reset_starts_over(embedded):
    bs = embedded.bootstrap_servers
    host, port = bs.rsplit(":", 1)
    with socket.create_connection((host, int(port)), CLIENT_TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 9999, 0, 1, -1))  # unknown API key
        assert sock.recv(16) == b""  # closed
    counts = embedded.request_counts(reset=True)
    assert counts.get("rejected") == 1
    assert embedded.request_counts() == {}
    # The wire read-out of an embedded broker agrees and is not counted itself.
    assert request_counts(bs) == {}


def test_broker_process_counts_are_read_over_its_port():
    with BrokerProcess() as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce("counted-topic", b"x")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        counts = broker.request_counts()
        assert counts.get("Produce") == 1, counts
        assert counts.get("Metadata", 0) >= 1 and counts.get("ApiVersions", 0) >= 1, counts
        assert broker.request_counts(reset=True) == counts
        assert broker.request_counts() == {}
