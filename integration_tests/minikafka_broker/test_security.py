"""minikafka's own secured listeners: mutual TLS, the CLI flags, restarts, request counts.

What every Kafka listener does (SASL, TLS, refusals) is pinned broker-independently in
integration_tests/kafka_semantics/test_security.py; these tests start their own minikafka.
"""

from __future__ import annotations

import ssl
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from connectors.testing._tls import TlsFiles, make_tls_files
from integration_tests.kafka_semantics._wire import WireClient, WireError, _string
from minikafka import BrokerConfigError, BrokerProcess, EmbeddedKafka, ListenerSecurity

from .conftest import CLIENT_TIMEOUT_S

# Seconds a client that must be refused gets to fetch metadata.
REFUSED_TIMEOUT_S = 5.0
ILLEGAL_SASL_STATE = 34
USERS = {"alice": "alice-pw"}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def sasl_kafka() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka(security=ListenerSecurity(protocol="SASL_PLAINTEXT", users=USERS)) as k:
        yield k


def sasl_config(bootstrap: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
    }


def create_topic(config: dict[str, str]) -> str:
    name = f"sec-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(CLIENT_TIMEOUT_S)
    return name


def test_mutual_tls_refuses_a_client_without_a_certificate(tls: TlsFiles) -> None:
    security = ListenerSecurity(
        protocol="SSL", certfile=tls.cert_file, keyfile=tls.key_file, client_cafile=tls.ca_file
    )
    with EmbeddedKafka(security=security) as kafka:
        base = {
            "bootstrap.servers": kafka.bootstrap_servers,
            "security.protocol": "SSL",
            "ssl.ca.location": tls.ca_file,
        }
        with pytest.raises(KafkaException):
            AdminClient(base).list_topics(timeout=REFUSED_TIMEOUT_S)
        with_cert = {
            **base,
            "ssl.certificate.location": tls.client_cert_file,
            "ssl.key.location": tls.client_key_file,
        }
        assert create_topic(with_cert)


def test_after_authentication_sasl_requests_are_illegal_and_others_served(
    sasl_kafka: EmbeddedKafka,
) -> None:
    host, port = sasl_kafka.host, sasl_kafka.port
    with WireClient(host, port) as client:
        error, _ = client.sasl_handshake("PLAIN")
        assert error == 0
        # SaslAuthenticate v0 (not flexible): bytes auth_bytes
        token = b"\0alice\0alice-pw"
        reader = client.request(36, 0, struct.pack(">i", len(token)) + token)
        assert reader.int16() == 0
        assert client.metadata_broker_count() == 1
        error, _ = client.sasl_handshake("PLAIN")
        assert error == ILLEGAL_SASL_STATE
    counts = sasl_kafka.request_counts()
    assert counts["SaslHandshake"] == 2 and counts["SaslAuthenticate"] == 1


def test_a_plaintext_listener_answers_sasl_requests_illegal() -> None:
    with EmbeddedKafka() as kafka, WireClient(kafka.host, kafka.port) as client:
        error, mechanisms = client.sasl_handshake("PLAIN")
        assert (error, mechanisms) == (ILLEGAL_SASL_STATE, [])


def test_a_handshake_v0_client_authenticates_with_bare_tokens(sasl_kafka: EmbeddedKafka) -> None:
    with WireClient(sasl_kafka.host, sasl_kafka.port) as client:
        reader = client.request(17, 0, _string("PLAIN"))
        assert reader.int16() == 0
        token = b"\0alice\0alice-pw"
        sock = client._sock
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert client._recv_exact(4) == b"\0\0\0\0"  # an empty bare token: success
        assert client.metadata_broker_count() == 1


def test_a_handshake_v0_client_with_a_wrong_password_is_disconnected(
    sasl_kafka: EmbeddedKafka,
) -> None:
    with WireClient(sasl_kafka.host, sasl_kafka.port) as client:
        assert client.request(17, 0, _string("PLAIN")).int16() == 0
        token = b"\0alice\0wrong"
        client._sock.sendall(struct.pack(">i", len(token)) + token)
        with pytest.raises((WireError, OSError)) as closed:
            client._recv_exact(4)
        # Closed by the broker, not the client's socket timeout (a frame the broker still
        # waits for would end so).
        assert not isinstance(closed.value, TimeoutError), closed.value


def test_security_survives_an_embedded_restart(sasl_kafka: EmbeddedKafka) -> None:
    sasl_kafka.restart()
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": sasl_kafka.bootstrap_servers}).list_topics(
            timeout=REFUSED_TIMEOUT_S
        )
    assert create_topic(sasl_config(sasl_kafka.bootstrap_servers, "PLAIN"))


def test_a_broker_process_gets_its_users_in_a_file_not_on_its_command_line(
    tls: TlsFiles,
) -> None:
    security = ListenerSecurity(
        protocol="SASL_SSL",
        users={"alice": "Sentinel-Pw-7"},
        mechanisms=("SCRAM-SHA-512",),
        certfile=tls.cert_file,
        keyfile=tls.key_file,
    )
    with BrokerProcess(security=security) as broker:
        cmdline = Path(f"/proc/{broker.pid}/cmdline").read_bytes()
        assert b"SASL_SSL" in cmdline and b"Sentinel-Pw-7" not in cmdline
        config = {
            "bootstrap.servers": broker.bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "Sentinel-Pw-7",
            "ssl.ca.location": tls.ca_file,
        }
        assert create_topic(config)
        with pytest.raises(BrokerConfigError, match="PLAINTEXT listener"):
            broker.request_counts()
    assert "Sentinel-Pw-7" not in broker.log_path.read_text()


def test_the_cli_refuses_bad_security_flags_naming_them() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "minikafka", "--security-protocol", "SASL_PLAINTEXT"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0
    assert "users must name at least one user" in out.stderr
    assert "LISTENING" not in out.stdout


def test_tls_clients_check_the_listener_certificate(tls: TlsFiles, tmp_path: Path) -> None:
    # A client that trusts another CA refuses the listener (the certificate is really checked).
    other = make_tls_files(tmp_path)
    security = ListenerSecurity(protocol="SSL", certfile=tls.cert_file, keyfile=tls.key_file)
    with EmbeddedKafka(security=security) as kafka:
        config = {"bootstrap.servers": kafka.bootstrap_servers, "security.protocol": "SSL"}
        with pytest.raises(KafkaException):
            AdminClient({**config, "ssl.ca.location": other.ca_file}).list_topics(
                timeout=REFUSED_TIMEOUT_S
            )
        context = ssl.create_default_context(cafile=tls.ca_file)
        with WireClient(kafka.host, kafka.port, context) as client:
            assert client.metadata_broker_count() == 1


def test_a_paused_broker_does_not_authenticate_until_resumed(sasl_kafka: EmbeddedKafka) -> None:
    admin = AdminClient(sasl_config(sasl_kafka.bootstrap_servers))
    sasl_kafka.faults.pause()
    try:
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=2)
        assert "SaslAuthenticate" not in sasl_kafka.request_counts()
    finally:
        sasl_kafka.faults.resume()
    assert admin.list_topics(timeout=CLIENT_TIMEOUT_S).brokers
    assert sasl_kafka.request_counts()["SaslAuthenticate"] >= 2  # SCRAM: two round trips
