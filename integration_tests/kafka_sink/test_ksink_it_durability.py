"""Durability on a cluster: the sink's state topics and the preflight's durability checks.

The state topics (epoch log, markers) get replication ``min(3, brokers)`` and topic config
``min.insync.replicas`` ``min(2, replication)`` unless the options say otherwise, read back
with an AdminClient (DescribeConfigs, Metadata). The exactly-once preflight warns about an
output topic with replication below 3, ``min.insync.replicas`` below 2 or unclean leader
election on, and about a weaker transaction state log; ``strict_cluster_checks=True``
raises ``KafkaCode.PREFLIGHT`` instead; no line carries a secret of ``client_config``.

The weak cases run on the session's cluster (``kafka_bootstrap``) with a topic made weak on
purpose, so they hold on any cluster; the strong ones on a cluster of three brokers
(``kafka_cluster``: a 3-node minikafka, or a real one given with ``KAFKA_NODE_CONTROL``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaSink
from integration_tests.support.kafka_cluster import KafkaCluster

SENTINEL = f"SENTINEL-{uuid.uuid4().hex}"
# librdkafka accepts and ignores SASL and TLS secrets with PLAINTEXT (see test_ksink_it_secrets).
SECRET_CONFIG = {"security.protocol": "PLAINTEXT", "sasl.password": SENTINEL}
# Seconds for one admin request of the test.
ADMIN_TIMEOUT_S = 30.0
TXN_LOG_NEEDS = {"transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2}
WEAK_TOPIC_CONFIG = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}


def topic_config(admin: AdminClient, topic: str, name: str) -> str:
    resource = ConfigResource("TOPIC", topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    return str(configs[name].value)


def replicas(admin: AdminClient, topic: str) -> set[int]:
    parts = admin.list_topics(topic=topic, timeout=ADMIN_TIMEOUT_S).topics[topic].partitions
    return {len(p.replicas) for p in parts.values()}


def weak_txn_log(admin: AdminClient) -> dict[str, int]:
    """The broker's transaction state log settings below what exactly-once needs."""
    broker = str(next(iter(admin.list_topics(timeout=ADMIN_TIMEOUT_S).brokers)))
    resource = ConfigResource("BROKER", broker)
    configs = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    values = {n: int(configs[n].value) for n in TXN_LOG_NEEDS if n in configs}
    return {n: v for n, v in values.items() if v < TXN_LOG_NEEDS[n]}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def sink_on(bootstrap: str, topic: str, **options: object) -> KafkaSink:
    return KafkaSink(
        bootstrap,
        topic,
        unique("dur"),
        epoch_log_topic=unique("dur-log"),
        marker_topic=unique("dur-markers"),
        **options,
    )


def state_topics(sink: KafkaSink) -> tuple[str, str]:
    """Create the sink's state topics as a run does: preflight (markers), the log's first read."""
    sink.preflight()
    sink.connector.open_epoch_log().load()
    return sink.config.epoch_log_topic, sink.config.marker_topic


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "connectors.kafka" and r.levelno == logging.WARNING
    ]


@pytest.fixture
def cluster_admin(kafka_cluster: KafkaCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})


@pytest.fixture
def strong_topic(cluster_admin: AdminClient) -> Iterator[Callable[[], str]]:
    """Factory: a topic with replication 3 and min.insync.replicas 2 on the 3-broker cluster."""
    made: list[str] = []

    def make() -> str:
        name = unique("dur-out")
        config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
        topic = NewTopic(name, num_partitions=1, replication_factor=3, config=config)
        cluster_admin.create_topics([topic])[name].result(timeout=ADMIN_TIMEOUT_S)
        made.append(name)
        return name

    yield make
    if made:
        for fut in cluster_admin.delete_topics(made).values():
            fut.result(timeout=ADMIN_TIMEOUT_S)


def test_state_topics_get_three_replicas_and_min_isr_two_on_three_brokers(
    kafka_cluster, cluster_admin, strong_topic, caplog
):
    caplog.set_level(logging.WARNING, "connectors.kafka")
    sink = sink_on(kafka_cluster.bootstrap, strong_topic())
    for topic in state_topics(sink):
        assert replicas(cluster_admin, topic) == {3}, topic
        assert topic_config(cluster_admin, topic, "min.insync.replicas") == "2", topic
    assert topic_config(cluster_admin, sink.config.epoch_log_topic, "cleanup.policy") == "compact"
    weak_log = weak_txn_log(cluster_admin)
    if weak_log:  # a real cluster configured below production values: its warning is right
        pytest.skip(f"this cluster's transaction state log is weaker than needed: {weak_log}")
    # the output topic and the transaction state log are as exactly-once needs: no warning
    assert warnings_of(caplog) == []
    sink_on(kafka_cluster.bootstrap, strong_topic(), strict_cluster_checks=True).preflight()


def test_state_topic_replication_and_min_isr_are_the_users_to_choose(
    kafka_cluster, cluster_admin, strong_topic
):
    sink = sink_on(
        kafka_cluster.bootstrap,
        strong_topic(),
        state_topic_replication=2,
        state_topic_min_insync_replicas=1,
    )
    for topic in state_topics(sink):
        assert replicas(cluster_admin, topic) == {2}, topic
        assert topic_config(cluster_admin, topic, "min.insync.replicas") == "1", topic
    only_isr = sink_on(kafka_cluster.bootstrap, strong_topic(), state_topic_min_insync_replicas=3)
    for topic in state_topics(only_isr):
        assert replicas(cluster_admin, topic) == {3}, topic
        assert topic_config(cluster_admin, topic, "min.insync.replicas") == "3", topic


def test_a_weak_output_topic_is_warned_about_one_line_per_setting(
    kafka_bootstrap, kafka_admin, new_topic, caplog
):
    caplog.set_level(logging.WARNING, "connectors.kafka")
    topic = new_topic("dur-weak", 1, config=WEAK_TOPIC_CONFIG)  # replication 1
    sink_on(kafka_bootstrap, topic, client_config=SECRET_CONFIG).preflight()
    lines = warnings_of(caplog)
    about_topic = [line for line in lines if line.startswith(f"topic {topic!r}: ")]
    assert sorted(line.split(":")[1].split("=")[0].strip() for line in about_topic) == [
        "min.insync.replicas",
        "replication.factor",
        "unclean.leader.election.enable",
    ]
    assert f"topic {topic!r}: replication.factor=1 " in "\n".join(about_topic)
    assert all("exactly-once" in line for line in about_topic)
    weak_log = weak_txn_log(kafka_admin)
    if len(kafka_admin.list_topics(timeout=ADMIN_TIMEOUT_S).brokers) == 1:
        assert "transaction.state.log.replication.factor" in weak_log  # one broker, one replica
    for setting, value in weak_log.items():
        assert any(f"{setting}={value} " in line for line in lines), setting
    assert not any(SENTINEL in line for line in lines)


def test_at_least_once_skips_the_durability_checks(kafka_bootstrap, new_topic, caplog):
    caplog.set_level(logging.WARNING, "connectors.kafka")
    topic = new_topic("dur-alo", 1, config=WEAK_TOPIC_CONFIG)
    sink_on(kafka_bootstrap, topic, guarantee="at-least-once").preflight()
    assert not [line for line in warnings_of(caplog) if topic in line]


def test_strict_cluster_checks_turn_the_warnings_into_a_preflight_error(kafka_bootstrap, new_topic):
    topic = new_topic("dur-strict", 1, config=WEAK_TOPIC_CONFIG)
    sink = sink_on(kafka_bootstrap, topic, strict_cluster_checks=True, client_config=SECRET_CONFIG)
    with pytest.raises(
        KafkaConnectorError,
        check=lambda e: (
            e.code
            in (
                KafkaCode.PREFLIGHT,
                KafkaCode.BROKER_UNAVAILABLE,
                KafkaCode.CONNECT,
                KafkaCode.TOPIC_MISSING,
            )
        ),
    ) as raised:
        sink.preflight()
    message = str(raised.value)
    for setting in ("replication.factor=1", "min.insync.replicas=1", "unclean"):
        assert setting in message
    assert "strict_cluster_checks=False" in message
    assert SENTINEL not in message and SENTINEL not in repr(raised.value)
