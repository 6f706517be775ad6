"""minikafka with several nodes, seen by real clients over TCP (docs/minikafka.md, "Several nodes").

What clients of any Kafka cluster rely on when leaders and coordinators move is pinned
broker-independently in integration_tests/kafka_semantics/test_failover.py; these tests
check minikafka's own side: placement, the answers of a node that does not lead or
coordinate, the node faults through each way in (fault API, BrokerProcess, the CLI).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from connectors.testing._tls import make_tls_files
from integration_tests.kafka_semantics._wire import (
    READ_UNCOMMITTED,
    WireClient,
    WireError,
    record_batch,
)
from minikafka import BrokerConfig, BrokerProcess, EmbeddedKafka, ListenerSecurity

from .conftest import CLIENT_TIMEOUT_S

NODES = (0, 1, 2)
NOT_LEADER_OR_FOLLOWER = 6
COORDINATOR_LOAD_IN_PROGRESS = 14
NOT_COORDINATOR = 16
TXN_KEY = 1
# Seconds to wait for a state the broker reaches on its own (a failure detected).
SETTLE_TIMEOUT_S = 30.0
POLL_S = 0.05


@pytest.fixture
def cluster() -> Iterator[EmbeddedKafka]:
    """A fresh three-node in-memory cluster per test."""
    cfg = BrokerConfig(nodes=3, group_initial_rebalance_delay_ms=0)
    with EmbeddedKafka(config=cfg) as kafka:
        yield kafka


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _topic(admin: AdminClient, partitions: int = 1, replication: int = 3, **config: str) -> str:
    name = f"nodes-{uuid.uuid4().hex[:10]}"
    fut = admin.create_topics([NewTopic(name, partitions, replication, config=config)])[name]
    fut.result(CLIENT_TIMEOUT_S)
    return name


def _leader(admin: AdminClient, topic: str, partition: int = 0) -> int:
    return int(
        admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        .topics[topic]
        .partitions[partition]
        .leader
    )


def _port(kafka: EmbeddedKafka, node: int) -> int:
    return kafka.ports[NODES.index(node)]


def _wait(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, (
            f"timed out after {SETTLE_TIMEOUT_S}s waiting for {what}"
        )
        time.sleep(POLL_S)


def test_metadata_lists_every_node_and_spreads_replicas_and_leaders(cluster):
    admin = _admin(cluster.bootstrap_servers)
    topic = _topic(admin, partitions=6)
    md = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    assert sorted(md.brokers) == list(NODES)
    assert sorted(b.port for b in md.brokers.values()) == sorted(cluster.ports)
    partitions = md.topics[topic].partitions.values()
    assert all(sorted(p.replicas) == list(NODES) == sorted(p.isrs) for p in partitions)
    assert {p.leader for p in partitions} == set(NODES)
    with pytest.raises(KafkaException) as info:
        _topic(admin, replication=4)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_default_replication_and_min_isr_come_from_the_broker():
    cfg = BrokerConfig(nodes=3, default_replication_factor=2, min_insync_replicas=2)
    with EmbeddedKafka(config=cfg) as kafka:
        admin = _admin(kafka.bootstrap_servers)
        topic = _topic(admin, replication=-1)
        md = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        assert len(md.topics[topic].partitions[0].replicas) == 2
        resources = [
            ConfigResource(ResourceType.TOPIC, topic),
            ConfigResource(ResourceType.BROKER, "2"),
        ]
        results = {
            r.name: f.result(CLIENT_TIMEOUT_S) for r, f in admin.describe_configs(resources).items()
        }
        assert results[topic]["min.insync.replicas"].value == "2"
        broker = results["2"]
        assert broker["broker.id"].value == "2"  # node 2 answered for itself
        assert broker["transaction.state.log.replication.factor"].value == "3"
        assert broker["transaction.state.log.min.isr"].value == "2"
        assert broker["unclean.leader.election.enable"].value == "false"


def test_a_node_answers_what_it_does_not_lead_or_coordinate_as_kafka_does(cluster):
    admin = _admin(cluster.bootstrap_servers)
    topic = _topic(admin)
    leader = _leader(admin, topic)
    follower = next(n for n in NODES if n != leader)
    with WireClient("127.0.0.1", _port(cluster, follower)) as client:
        batch = record_batch([b"v"], producer_id=-1, producer_epoch=-1, base_sequence=-1)
        assert client.produce(topic, 0, batch).error_code == NOT_LEADER_OR_FOLLOWER
        assert client.fetch(topic, 0, 0, READ_UNCOMMITTED).error_code == NOT_LEADER_OR_FOLLOWER
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    answers = []
    for node in NODES:
        with WireClient("127.0.0.1", _port(cluster, node)) as client:
            answers.append(client.find_coordinator(tid, TXN_KEY))
    assert len(set(answers)) == 1 and answers[0].error_code == 0  # every node names the same one
    coordinator = answers[0].node_id
    for node in NODES:
        with WireClient("127.0.0.1", _port(cluster, node)) as client:
            expected = 0 if node == coordinator else NOT_COORDINATOR
            assert client.init_transactional_id(tid, 60_000) == expected


def test_coordinators_are_spread_over_the_nodes(cluster):
    with WireClient("127.0.0.1", cluster.port) as client:
        nodes = {client.find_coordinator(f"id-{i}", TXN_KEY).node_id for i in range(30)}
        groups = {client.find_coordinator(f"group-{i}", 0).node_id for i in range(30)}
    assert nodes == set(NODES) == groups


def test_a_moved_coordinator_loads_then_serves_and_clients_follow(cluster):
    admin = _admin(cluster.bootstrap_servers)
    topic = _topic(admin)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    with WireClient("127.0.0.1", cluster.port) as client:
        old = client.find_coordinator(tid, TXN_KEY).node_id
    new = next(n for n in NODES if n != old)
    producer.begin_transaction()
    producer.produce(topic, b"across", partition=0)
    cluster.faults.move_coordinator("transaction", tid, new, load_s=600)
    with WireClient("127.0.0.1", _port(cluster, new)) as client:
        assert client.find_coordinator(tid, TXN_KEY).node_id == new
        assert client.init_transactional_id(tid, 60_000) == COORDINATOR_LOAD_IN_PROGRESS
    with WireClient("127.0.0.1", _port(cluster, old)) as client:
        assert client.init_transactional_id(tid, 60_000) == NOT_COORDINATOR
    cluster.faults.move_coordinator("transaction", tid, new, load_s=0)  # loaded
    producer.commit_transaction(CLIENT_TIMEOUT_S)  # librdkafka finds the new one and retries
    leader = _leader(admin, topic)
    cluster.faults.move_leader(topic, 0, next(n for n in NODES if n != leader))
    producer.begin_transaction()
    producer.produce(topic, b"after", partition=0)
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    low, high = _offsets(cluster.bootstrap_servers, topic)
    assert (low, high) == (0, 4)  # two records, two commit markers


def _offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), CLIENT_TIMEOUT_S)
    finally:
        consumer.close()


def test_hard_stop_resets_connections_and_refuses_the_port_until_the_node_starts(cluster):
    with WireClient("127.0.0.1", _port(cluster, 1)) as client:
        client.api_versions()
        cluster.faults.stop_node(1)
        with pytest.raises((WireError, OSError)):
            client.api_versions()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", _port(cluster, 1)), CLIENT_TIMEOUT_S)
    assert cluster.faults.node_status() == {0: "running", 1: "down", 2: "running"}
    admin = _admin(cluster.bootstrap_servers)
    assert sorted(admin.list_topics(timeout=CLIENT_TIMEOUT_S).brokers) == [0, 2]
    cluster.faults.stop_node(1)  # a stopped node stays stopped
    cluster.faults.start_node(1)
    with WireClient("127.0.0.1", _port(cluster, 1)) as client:
        assert client.metadata_broker_count() == 3


def test_a_hard_stop_is_noticed_after_the_detection_delay_a_clean_one_at_once():
    cfg = BrokerConfig(nodes=3, node_failure_detection_ms=1500)
    with EmbeddedKafka(config=cfg) as kafka:
        admin = _admin(kafka.bootstrap_servers)
        hard, clean = _topic(admin), _topic(admin)
        hard_leader = _leader(admin, hard)
        kafka.faults.stop_node(hard_leader)
        assert kafka.faults.node_status()[hard_leader] == "stopped"
        assert _leader(admin, hard) == hard_leader  # Metadata still names the dead leader
        _wait(lambda: kafka.faults.node_status()[hard_leader] == "down", "the failure detected")
        assert _leader(admin, hard) not in (hard_leader, -1)
        kafka.faults.start_node(hard_leader)
        clean_leader = _leader(admin, clean)
        kafka.faults.stop_node(clean_leader, clean=True)
        assert kafka.faults.node_status()[clean_leader] == "down"
        assert _leader(admin, clean) not in (clean_leader, -1)


def test_acks_all_below_min_isr_is_refused_and_a_partition_without_replicas_has_no_leader(cluster):
    admin = _admin(cluster.bootstrap_servers)
    guarded = _topic(admin, **{"min.insync.replicas": "2"})
    single = _topic(admin, partitions=3, replication=1)  # one partition on each node
    survivor = _leader(admin, guarded)
    for node in NODES:
        if node != survivor:
            cluster.faults.stop_node(node)
    errors: list[KafkaError | None] = []
    strict = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "retries": 0})
    strict.produce(guarded, b"x", partition=0, on_delivery=lambda err, _m: errors.append(err))
    loose = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": 1, "retries": 0})
    loose.produce(guarded, b"y", partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert strict.flush(CLIENT_TIMEOUT_S) == 0 and loose.flush(CLIENT_TIMEOUT_S) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert errors[1] is None
    partitions = admin.list_topics(single, timeout=CLIENT_TIMEOUT_S).topics[single].partitions
    offline = [p for p in partitions.values() if p.replicas != [survivor]]
    assert len(offline) == 2
    for p in offline:
        assert p.leader == -1 and p.error.code() == KafkaError.LEADER_NOT_AVAILABLE


def test_broker_process_and_the_cli_control_nodes(tmp_path):
    with BrokerProcess(nodes=3, data_dir=tmp_path / "data") as broker:
        assert len(broker.bootstrap_servers.split(",")) == 3
        cli = [sys.executable, "-m", "minikafka", "control", broker.control_address]

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*cli, *args], capture_output=True, text=True, timeout=60, check=False
            )

        stopped = run("stop", "2")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(run("status").stdout)["nodes"] == {
            "0": "running",
            "1": "running",
            "2": "down",
        }
        refused = run("stop", "7")
        assert refused.returncode == 1 and "no node 7" in refused.stderr
        broker.start_node(2)
        assert broker.node_status() == dict.fromkeys(NODES, "running")
        ports = list(broker.ports)
        broker.restart()
        assert broker.ports == ports  # every node on its port again
        admin = _admin(broker.bootstrap_servers)
        assert sorted(admin.list_topics(timeout=CLIENT_TIMEOUT_S).brokers) == list(NODES)


def test_each_node_lists_only_the_groups_it_coordinates(cluster):
    admin = _admin(cluster.bootstrap_servers)
    topic = _topic(admin)
    groups = [f"g-{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
    from confluent_kafka import ConsumerGroupTopicPartitions

    for group in groups:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])
        admin.alter_consumer_group_offsets([request])[group].result(CLIENT_TIMEOUT_S)
    listed = admin.list_consumer_groups().result(CLIENT_TIMEOUT_S).valid
    names = [g.group_id for g in listed if g.group_id in groups]
    assert sorted(names) == sorted(groups)  # every group once, though every node was asked


def test_every_node_of_a_secured_cluster_takes_the_listener_security(tmp_path):
    tls = make_tls_files(tmp_path)
    security = ListenerSecurity(
        protocol="SASL_SSL",
        users={"alice": "alice-pw"},
        certfile=tls.cert_file,
        keyfile=tls.key_file,
    )
    with EmbeddedKafka(config=BrokerConfig(nodes=3), security=security) as kafka:
        conf = {
            "bootstrap.servers": kafka.bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "alice-pw",
            "ssl.ca.location": tls.ca_file,
        }
        admin = AdminClient(conf)
        topic = _topic(admin, partitions=3)
        producer = Producer({**conf, "transactional.id": f"sec-{uuid.uuid4().hex[:6]}"})
        producer.init_transactions(CLIENT_TIMEOUT_S)
        kafka.faults.stop_node(_leader(admin, topic, 1))
        producer.begin_transaction()
        for partition in range(3):
            producer.produce(topic, b"v", partition=partition)
        producer.commit_transaction(CLIENT_TIMEOUT_S)
