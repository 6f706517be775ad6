"""docker/docker-compose.cluster.yml: parses, and holds the settings it promises.

No Docker engine runs here: the file is checked as data (PyYAML, present through the
pinned pre-commit of the dev extra), the node control script as text.
"""

import base64
import re
from pathlib import Path
from typing import Any

import yaml

DOCKER = Path(__file__).resolve().parent.parent / "docker"
COMPOSE = DOCKER / "docker-compose.cluster.yml"
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
# What exactly-once needs of every broker (docs/deploying.md, section 9).
REQUIRED = {
    "KAFKA_DEFAULT_REPLICATION_FACTOR": "3",
    "KAFKA_MIN_INSYNC_REPLICAS": "2",
    "KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE": "false",
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "2",
    "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "3",
}


def services() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    return dict(doc["services"])


def env(service: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in service["environment"].items()}


def test_three_kraft_brokers_of_kafka_4_and_a_controller_apart():
    svc = services()
    assert set(svc) == {"controller", *BROKERS}
    for name, service in svc.items():
        assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", service["image"]), name
    assert env(svc["controller"])["KAFKA_PROCESS_ROLES"] == "controller"
    node_ids = [env(svc[b])["KAFKA_NODE_ID"] for b in BROKERS]
    assert node_ids == ["1", "2", "3"]  # kafka-N is broker id N (kafka-node-control.sh)
    cluster_ids = {env(s)["CLUSTER_ID"] for s in svc.values()}
    assert len(cluster_ids) == 1
    (cluster_id,) = cluster_ids
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16  # a KRaft cluster id


def test_every_broker_has_the_exactly_once_settings():
    for broker in BROKERS:
        settings = env(services()[broker])
        assert settings["KAFKA_PROCESS_ROLES"] == "broker", broker
        assert {k: settings.get(k) for k in REQUIRED} == REQUIRED, broker


def test_each_broker_is_published_on_its_own_loopback_port():
    addresses = []
    for broker in BROKERS:
        service = services()[broker]
        (port,) = service["ports"]
        host, published, inside = port.split(":")
        assert host == "127.0.0.1" and published == inside, broker
        assert f"EXTERNAL://localhost:{published}" in env(service)["KAFKA_ADVERTISED_LISTENERS"]
        addresses.append(f"localhost:{published}")
    assert addresses == ["localhost:9192", "localhost:9193", "localhost:9194"]


def test_the_node_control_script_stops_and_starts_the_broker_of_an_id():
    script = (DOCKER / "kafka-node-control.sh").read_text()
    assert "docker-compose.cluster.yml" in script
    assert 'stop) $compose stop "kafka-$2"' in script
    assert 'start) $compose up -d --wait "kafka-$2"' in script
    assert (DOCKER / "kafka-node-control.sh").stat().st_mode & 0o111
