"""Server selection and container configurations of connectors.testing, without Docker."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors.testing import containers
from connectors.testing import postgres as pg_testing

# Building a container object normally asks the engine for its API version; naming the
# version builds it without any engine, which is all a configuration test needs.
NO_ENGINE = {"version": "1.44"}
COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "docker-compose.yml"


def test_kafka_container_is_a_single_node_kraft_broker_that_allows_transactions() -> None:
    container = containers.kafka_container(docker_client_kw=NO_ENGINE)
    env = container.env
    assert container.image.endswith(containers.KAFKA_IMAGE)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "ZOOKEEPER" not in " ".join(env)
    # Kafka's defaults (3 and 2) cannot be met by one broker: init_transactions would fail.
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert (
        env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@localhost:{containers.KAFKA_CONTROLLER_PORT}"
    )
    assert list(container.ports) == [str(containers.KAFKA_PORT)]
    command = container._command
    assert command[:2] == ["sh", "-c"]
    assert (
        containers.KAFKA_SCRIPT_READY in command[2] and containers.KAFKA_START_SCRIPT in command[2]
    )


def test_kafka_start_script_advertises_the_mapped_address() -> None:
    script = containers.kafka_start_script("127.0.0.1:49153")
    assert "KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://127.0.0.1:49153," in script
    assert f"BROKER://$(hostname):{containers.KAFKA_BROKER_PORT}" in script
    assert script.rstrip().endswith("exec /etc/kafka/docker/run")
    listeners = containers.kafka_broker_env()["KAFKA_LISTENERS"]
    assert "CONTROLLER" not in script.split("ADVERTISED_LISTENERS=")[1].split("\n")[0]
    assert f"BROKER://:{containers.KAFKA_BROKER_PORT}" in listeners


def test_kafka_container_with_sasl_has_a_sasl_plaintext_client_listener() -> None:
    sasl = containers.KafkaSasl("alice", "pw-1")
    container = containers.kafka_container(docker_client_kw=NO_ENGINE, sasl=sasl)
    env = container.env
    assert env["KAFKA_LISTENERS"].startswith(f"SASL_PLAINTEXT://:{containers.KAFKA_PORT},")
    protocol_map = env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in protocol_map and "BROKER:PLAINTEXT" in protocol_map
    assert env["KAFKA_SASL_ENABLED_MECHANISMS"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    assert env["KAFKA_OPTS"] == f"-Djava.security.auth.login.config={containers.KAFKA_JAAS_FILE}"
    script = containers.kafka_start_script("127.0.0.1:49153", sasl=True)
    assert "KAFKA_ADVERTISED_LISTENERS=SASL_PLAINTEXT://127.0.0.1:49153," in script
    jaas = sasl.jaas_config()
    assert 'user_alice="pw-1";' in jaas and "ScramLoginModule required;" in jaas
    command = sasl.scram_command()
    assert "SCRAM-SHA-256=[password=pw-1],SCRAM-SHA-512=[password=pw-1]" in command
    assert f"localhost:{containers.KAFKA_BROKER_PORT}" in command
    assert command[-2:] == ["--entity-name", "alice"]
    assert sasl.client_settings("PLAIN") == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "pw-1",
    }
    assert "pw-1" not in repr(sasl)
    assert containers.KafkaSasl().password != containers.KafkaSasl().password
    # without sasl the listener stays PLAINTEXT
    assert "SASL" not in containers.kafka_broker_env()["KAFKA_LISTENERS"]


def test_postgres_container_enables_prepared_transactions() -> None:
    container = containers.postgres_container(docker_client_kw=NO_ENGINE)
    assert container.image.endswith(containers.POSTGRES_IMAGE)
    assert container._command == [
        "postgres",
        "-c",
        f"max_prepared_transactions={containers.POSTGRES_MAX_PREPARED_TRANSACTIONS}",
    ]
    custom = containers.postgres_container(max_prepared_transactions=0, docker_client_kw=NO_ENGINE)
    assert custom._command[-1] == "max_prepared_transactions=0"
    with pytest.raises(ValueError, match="max_prepared_transactions"):
        containers.postgres_command(-1)


def test_compose_file_matches_the_container_settings() -> None:
    text = COMPOSE.read_text()
    kafka = text.split("\n  postgres:")[0]
    for key in (
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
    ):
        assert re.search(rf"^\s+{key}: 1$", kafka, re.MULTILINE), key
    assert f"image: {containers.KAFKA_IMAGE}" in kafka
    postgres = text.split("\n  postgres:")[1]
    assert f"image: {containers.POSTGRES_IMAGE}" in postgres
    assert re.search(r"max_prepared_transactions=[1-9]", postgres)


@contextlib.contextmanager
def _fake_server(kind: str, started: list[str], **kwargs: object) -> Iterator[object]:
    started.append(kind)
    yield type("Fake", (), {"dsn": f"dsn-of-{kind}"})()


def test_postgres_dsn_prefers_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    monkeypatch.setenv("POSTGRES_DSN", "host=db.example port=5432")
    monkeypatch.setattr(
        pg_testing, "start_postgres_server", lambda **kw: _fake_server("any", started, **kw)
    )
    with pg_testing.postgres_dsn() as dsn:
        assert dsn == "host=db.example port=5432"
    assert started == []  # no server was started


@pytest.mark.parametrize(("docker", "kind"), [(True, "container"), (False, "embedded")])
def test_without_environment_a_container_wins_over_embedded(
    monkeypatch: pytest.MonkeyPatch, docker: bool, kind: str
) -> None:
    started: list[str] = []
    monkeypatch.delenv("POSTGRES_DSN", raising=False)
    monkeypatch.setattr(containers, "docker_answers", lambda: docker)
    monkeypatch.setattr(
        containers, "ContainerPostgres", lambda **kw: _fake_server("container", started, **kw)
    )
    monkeypatch.setattr(
        pg_testing, "EmbeddedPostgres", lambda **kw: _fake_server("embedded", started, **kw)
    )
    with pg_testing.postgres_dsn(max_prepared_transactions=9) as dsn:
        assert dsn == f"dsn-of-{kind}"
    assert started == [kind]
