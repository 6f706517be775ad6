"""Durability: kill -9 and restart keeps committed data, offsets and fencing state."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from minikafka import BrokerProcess, EmbeddedKafka

from .conftest import CLIENT_TIMEOUT_S, make_topic
from .helpers import read_all


def _group_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
        return tp.offset
    finally:
        consumer.close()


def test_kill9_restart_keeps_committed_state(tmp_path):
    with BrokerProcess(data_dir=tmp_path / "data") as broker:
        bs = broker.bootstrap_servers
        topic = make_topic(bs)
        zombie = Producer({"bootstrap.servers": bs, "transactional.id": "restart-tx"})
        zombie.init_transactions(CLIENT_TIMEOUT_S)
        zombie.begin_transaction()
        for i in range(20):
            zombie.produce(topic, b"c%d" % i)
        group_md = Consumer({"bootstrap.servers": bs, "group.id": "restart-g"})
        zombie.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 20)], group_md.consumer_group_metadata(), CLIENT_TIMEOUT_S
        )
        group_md.close()
        zombie.commit_transaction(CLIENT_TIMEOUT_S)
        zombie.begin_transaction()
        zombie.produce(topic, b"aborted")
        zombie.flush(CLIENT_TIMEOUT_S)
        zombie.abort_transaction(CLIENT_TIMEOUT_S)
        # a newer instance fences the first one before the crash
        current = Producer({"bootstrap.servers": bs, "transactional.id": "restart-tx"})
        current.init_transactions(CLIENT_TIMEOUT_S)
        plain = Consumer({"bootstrap.servers": bs, "group.id": "plain-g"})
        plain.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        plain.close()

        broker.kill()
        assert not broker.alive
        broker.restart()
        assert broker.bootstrap_servers == bs

        assert read_all(bs, topic) == [b"c%d" % i for i in range(20)]
        assert read_all(bs, topic, committed=False)[-1] == b"aborted"
        assert _group_offset(bs, "restart-g", topic) == 20
        assert _group_offset(bs, "plain-g", topic) == 7
        with pytest.raises(KafkaException) as info:
            zombie.begin_transaction()
            zombie.produce(topic, b"zombie")
            zombie.commit_transaction(CLIENT_TIMEOUT_S)
        assert info.value.args[0].fatal()
        current.begin_transaction()
        current.produce(topic, b"after-restart")
        current.commit_transaction(CLIENT_TIMEOUT_S)
        assert read_all(bs, topic)[-1] == b"after-restart"


def test_kill9_with_open_transaction_then_new_instance_aborts_it(tmp_path):
    with BrokerProcess(data_dir=tmp_path / "data") as broker:
        bs = broker.bootstrap_servers
        topic = make_topic(bs)
        producer = Producer({"bootstrap.servers": bs, "transactional.id": "open-tx"})
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(topic, b"pending")
        producer.flush(CLIENT_TIMEOUT_S)
        broker.kill()
        broker.restart()
        # the open transaction pins the LSO: read_committed sees nothing yet
        assert read_all(bs, topic) == []
        fresh = Producer({"bootstrap.servers": bs, "transactional.id": "open-tx"})
        fresh.init_transactions(CLIENT_TIMEOUT_S)  # aborts the open transaction
        assert read_all(bs, topic) == []
        assert read_all(bs, topic, committed=False) == [b"pending"]
        fresh.begin_transaction()
        fresh.produce(topic, b"done")
        fresh.commit_transaction(CLIENT_TIMEOUT_S)
        assert read_all(bs, topic) == [b"done"]


def test_idempotent_producer_survives_restart_without_duplicates(tmp_path):
    with BrokerProcess(data_dir=tmp_path / "data") as broker:
        bs = broker.bootstrap_servers
        topic = make_topic(bs)
        producer = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
        for i in range(50):
            producer.produce(topic, b"%d" % i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        broker.terminate()
        broker.restart()
        for i in range(50, 60):
            producer.produce(topic, b"%d" % i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        assert read_all(bs, topic, committed=False) == [b"%d" % i for i in range(60)]


def test_embedded_restart_with_and_without_data_dir(tmp_path):
    with EmbeddedKafka(data_dir=tmp_path / "d") as durable:
        topic = make_topic(durable.bootstrap_servers)
        producer = Producer({"bootstrap.servers": durable.bootstrap_servers})
        producer.produce(topic, b"kept")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        durable.restart()
        assert read_all(durable.bootstrap_servers, topic) == [b"kept"]
    with EmbeddedKafka() as volatile:
        topic = make_topic(volatile.bootstrap_servers)
        port = volatile.port
        volatile.restart()
        assert volatile.port == port
        admin_md = Producer({"bootstrap.servers": volatile.bootstrap_servers}).list_topics(
            timeout=CLIENT_TIMEOUT_S
        )
        assert topic not in admin_md.topics  # memory-only state is gone after a restart


# Milliseconds a started broker "loads" its topics in the tests below: longer than any
# test, so loading ends only when the test says so (end_loading), never by the clock.
LOAD_DELAY_MS = 600_000
# Seconds a listing may take to show a topic once loading has ended: bounds a hang only.
LOADED_TIMEOUT_S = 60.0


def _wait_for_loaded(admin, name: str) -> None:
    """Wait until ``name`` shows in the full topic listing, without an error."""
    deadline = time.monotonic() + LOADED_TIMEOUT_S
    while True:
        md = admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics.get(name)
        if md is not None and md.error is None:
            return
        assert time.monotonic() < deadline, f"topic {name} never showed"
        time.sleep(0.1)


def _loading_broker(tmp_path, *args: str) -> BrokerProcess:
    """A broker that "loads" its topics for LOAD_DELAY_MS after each start."""
    return BrokerProcess(
        data_dir=tmp_path / "data", extra_args=["--topic-load-delay-ms", str(LOAD_DELAY_MS), *args]
    )


def test_topic_load_delay_hides_topics_after_a_restart(tmp_path):
    # --topic-load-delay-ms imitates a restarted Kafka broker that answers Metadata before
    # it has loaded its topics (the sink's preflight must wait, not call them missing).
    from confluent_kafka.admin import AdminClient

    with _loading_broker(tmp_path) as broker:
        [node] = broker.node_status()
        broker.end_loading(node)  # the first start's loading: over now
        topic = make_topic(broker.bootstrap_servers)
        broker.restart()  # loads again, until end_loading
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert topic not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics
        assert topic not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics  # still loading
        broker.end_loading(node)
        _wait_for_loaded(admin, topic)


@pytest.mark.parametrize("mode", ["errors", "empty"])
def test_topic_load_modes_answer_with_errors_or_nothing(tmp_path, mode):
    # --topic-load-mode: while "loading", Metadata answers every topic with
    # LEADER_NOT_AVAILABLE ("errors") or leaves every topic out, even a named one ("empty").
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    with _loading_broker(tmp_path, "--topic-load-mode", mode) as broker:
        [node] = broker.node_status()
        broker.end_loading(node)
        topic = make_topic(broker.bootstrap_servers)
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        listed = admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics
        if mode == "errors":
            assert listed[topic].error.code() == KafkaError.LEADER_NOT_AVAILABLE
            assert listed[topic].partitions == {}
        else:
            assert listed == {}
        broker.end_loading(node)
        _wait_for_loaded(admin, topic)
