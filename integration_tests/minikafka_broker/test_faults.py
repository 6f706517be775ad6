"""Fault hooks make real confluent-kafka clients see the injected behaviour."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from minikafka._faults import ApiKey

from .conftest import CLIENT_TIMEOUT_S
from .helpers import read_all


def _producer(bootstrap: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **extra})


def test_fail_next_surfaces_error_code_to_admin_client(embedded):
    admin = AdminClient({"bootstrap.servers": embedded.bootstrap_servers})
    embedded.faults.fail_next(ApiKey.CREATE_TOPICS, 1, KafkaError.POLICY_VIOLATION)
    fut = admin.create_topics([NewTopic("fault-topic", 1, 1)])["fault-topic"]
    with pytest.raises(KafkaException) as info:
        fut.result(CLIENT_TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION
    # only one request was failed: the retry creates the topic
    admin.create_topics([NewTopic("fault-topic", 1, 1)])["fault-topic"].result(CLIENT_TIMEOUT_S)


def test_fail_next_produce_non_retriable_reaches_delivery_callback(embedded, topic_factory):
    topic = topic_factory(embedded.bootstrap_servers)
    producer = _producer(embedded.bootstrap_servers, retries=0)
    producer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    embedded.faults.fail_next("Produce", 1, KafkaError.MSG_SIZE_TOO_LARGE)
    results = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
    producer.flush(CLIENT_TIMEOUT_S)
    assert len(results) == 1 and results[0] is not None
    assert results[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert read_all(embedded.bootstrap_servers, topic) == []  # nothing was appended


def test_fail_next_retriable_produce_error_is_retried(embedded, topic_factory):
    topic = topic_factory(embedded.bootstrap_servers)
    producer = _producer(embedded.bootstrap_servers, **{"enable.idempotence": True})
    embedded.faults.fail_next(ApiKey.PRODUCE, 2, KafkaError.NOT_LEADER_FOR_PARTITION)
    errors = []
    for i in range(5):
        producer.produce(topic, b"%d" % i, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert errors == [None] * 5
    assert read_all(embedded.bootstrap_servers, topic) == [b"%d" % i for i in range(5)]


def test_fail_next_end_txn_is_abortable_for_transactional_producer(embedded, topic_factory):
    topic = topic_factory(embedded.bootstrap_servers)
    producer = _producer(embedded.bootstrap_servers, **{"transactional.id": "fault-tx"})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"doomed")
    embedded.faults.fail_next(ApiKey.END_TXN, 1, KafkaError.INVALID_TXN_STATE)
    with pytest.raises(KafkaException) as info:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_TXN_STATE
    if err.txn_requires_abort():
        producer.abort_transaction(CLIENT_TIMEOUT_S)
    assert read_all(embedded.bootstrap_servers, topic) == []


def test_delay_next_holds_the_response(embedded, topic_factory):
    topic = topic_factory(embedded.bootstrap_servers)
    producer = _producer(embedded.bootstrap_servers)
    producer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    delay = 1.5
    embedded.faults.delay_next(ApiKey.PRODUCE, 1, delay)
    start = time.monotonic()
    producer.produce(topic, b"late")
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert time.monotonic() - start >= delay
    assert read_all(embedded.bootstrap_servers, topic) == [b"late"]


def test_drop_connections_client_recovers(embedded, topic_factory):
    topic = topic_factory(embedded.bootstrap_servers)
    producer = _producer(embedded.bootstrap_servers, **{"enable.idempotence": True})
    producer.produce(topic, b"before")
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    embedded.faults.drop_connections()
    producer.produce(topic, b"after")
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert read_all(embedded.bootstrap_servers, topic) == [b"before", b"after"]


def test_pause_stops_answers_until_resume(embedded, topic_factory):
    topic = topic_factory(embedded.bootstrap_servers)
    producer = _producer(embedded.bootstrap_servers)
    producer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    embedded.faults.pause()
    producer.produce(topic, b"held")
    assert producer.flush(1.0) == 1  # still in flight: the broker does not answer
    embedded.faults.resume()
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert read_all(embedded.bootstrap_servers, topic) == [b"held"]
