"""The checker's raw scan authenticates as the cluster's ``client_config`` says (``_wire_auth``).

Unit tests of one module: SCRAM against the test vector of RFC 7677 (an independent
reference), the SASL exchanges' framing against a scripted broker on a local socket that
answers with that vector, a refused PLAIN login as the typed error, and the settings the
raw scan refuses to guess. The scan over TLS and SASL against a secured broker belongs to
the suite's secured runs (minikafka's secured listeners).
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._client import Cluster, Settings
from connectors.verify import WireError, _wire_auth
from connectors.verify._wire_auth import Scram, open_broker, tls_context

# RFC 7677, section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
TIMEOUT_S = 10.0


def test_scram_sha_256_follows_rfc_7677() -> None:
    scram = Scram("sha256", "user", "pencil", nonce=RFC_NONCE)
    assert scram.client_first() == RFC_CLIENT_FIRST
    assert scram.client_final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert scram.verify(RFC_SERVER_FINAL)
    assert not scram.verify(b"v=" + b"A" * 44)
    assert not scram.verify(b"e=invalid-proof")


def test_scram_refuses_a_server_nonce_that_does_not_extend_its_own() -> None:
    scram = Scram("sha256", "user", "pencil", nonce="abc")
    with pytest.raises(WireError, match="server-first"):
        scram.client_final(b"r=xyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


# -- a scripted broker: answers SaslHandshake and SaslAuthenticate v1 ---------------------
Reply = Callable[[bytes], tuple[int, bytes]]  # auth bytes -> (error code, auth bytes)


def _read_request(conn: socket.socket) -> tuple[int, int, bytes]:
    (size,) = struct.unpack(">i", _wire_auth.recv_exact(conn, 4))
    data = _wire_auth.recv_exact(conn, size)
    api_key, _version, correlation, client_len = struct.unpack_from(">hhih", data, 0)
    return api_key, correlation, data[10 + client_len :]


def _answer(conn: socket.socket, correlation: int, body: bytes) -> None:
    payload = struct.pack(">i", correlation) + body
    conn.sendall(struct.pack(">i", len(payload)) + payload)


@pytest.fixture
def broker() -> Iterator[Callable[[list[Reply]], tuple[str, int, list[bytes]]]]:
    server = socket.create_server(("127.0.0.1", 0))
    threads: list[threading.Thread] = []

    def start(replies: list[Reply]) -> tuple[str, int, list[bytes]]:
        received: list[bytes] = []

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                _key, corr, body = _read_request(conn)  # SaslHandshake: mechanism
                received.append(body[2:])
                _answer(conn, corr, struct.pack(">hi", 0, 0))
                for reply in replies:
                    _key, corr, body = _read_request(conn)
                    received.append(body[4:])
                    error, auth = reply(body[4:])
                    text = b"" if not error else b"refused"
                    body = struct.pack(">hh", error, len(text) if error else -1) + text
                    _answer(conn, corr, body + struct.pack(">i", len(auth)) + auth + b"\0" * 8)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return "127.0.0.1", server.getsockname()[1], received

    yield start
    server.close()
    for thread in threads:
        thread.join(TIMEOUT_S)


def cluster(**settings: str) -> Cluster:
    return Cluster(bootstrap_servers="127.0.0.1:1", config=Settings.of(settings))


def test_scram_exchange_on_the_wire(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_wire_auth.secrets, "token_urlsafe", lambda _n: RFC_NONCE)
    host, port, received = broker(
        [lambda _b: (0, RFC_SERVER_FIRST), lambda _b: (0, RFC_SERVER_FINAL)]
    )
    scram = cluster(
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "user",
            "sasl.password": "pencil",
        }
    )
    with open_broker(host, port, scram, TIMEOUT_S):
        pass
    assert received == [b"SCRAM-SHA-256", RFC_CLIENT_FIRST, RFC_CLIENT_FINAL]


def test_plain_login_and_its_refusal(broker: Any) -> None:
    settings = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "app",
        "sasl.password": "SENTINEL-wire",
    }
    host, port, received = broker([lambda b: (0 if b == b"\0app\0SENTINEL-wire" else 58, b"")])
    with open_broker(host, port, cluster(**settings), TIMEOUT_S):
        pass
    assert received == [b"PLAIN", b"\0app\0SENTINEL-wire"]
    host, port, _ = broker([lambda _b: (58, b"")])
    with pytest.raises(
        KafkaConnectorError,
        match="authentication failed",
        check=lambda e: e.code is KafkaCode.AUTHENTICATION,
    ) as info:
        open_broker(host, port, cluster(**settings), TIMEOUT_S)
    assert "SENTINEL" not in str(info.value) and "sasl.password" in str(info.value)


@pytest.mark.parametrize("mechanism", ["GSSAPI", "OAUTHBEARER"])
def test_mechanisms_the_raw_scan_does_not_speak_are_named(mechanism: str) -> None:
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism}
    with pytest.raises(WireError, match=f"sasl.mechanism={mechanism}"):
        open_broker("127.0.0.1", 1, cluster(**settings), TIMEOUT_S)


def test_tls_context_follows_librdkafkas_settings() -> None:
    strict = tls_context({})
    assert strict.check_hostname and strict.verify_mode is ssl.CERT_REQUIRED
    no_host = tls_context({"ssl.endpoint.identification.algorithm": "none"})
    assert not no_host.check_hostname and no_host.verify_mode is ssl.CERT_REQUIRED
    none = tls_context({"enable.ssl.certificate.verification": "false"})
    assert not none.check_hostname and none.verify_mode is ssl.CERT_NONE
    with pytest.raises(WireError, match="ssl.certificate.location"):
        tls_context({"ssl.keystore.location": "/x.p12"})
