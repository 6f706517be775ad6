"""The per-connection SASL state machine (minikafka._sasl), frame in, answer out."""

import io
import pickle
import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1 import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2 import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0 import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1 import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from minikafka import ListenerSecurity
from minikafka._errors import ProtocolError
from minikafka._protocol import request_class, response_class
from minikafka._sasl import (
    FAILED_AUTHENTICATION_DELAY_S,
    Credentials,
    SaslSession,
    SaslState,
)
from tests.minikafka.test_scram import client_final

USERS = {"alice": "alice-pw", "bob": "bob-pw"}
METADATA, SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 3, 17, 18, 36


@pytest.fixture(scope="module")
def credentials() -> Credentials:
    return Credentials(ListenerSecurity(protocol="SASL_PLAINTEXT", users=USERS))


@pytest.fixture
def session(credentials: Credentials) -> SaslSession:
    return SaslSession(credentials, "127.0.0.1")


def frame(api_key: int, version: int, corr: int = 7, **body) -> bytes:
    cls = request_class(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key, request_api_version=version, correlation_id=corr, client_id="t"
        ),
    )
    entity_writer(cls)(buf, cls(**body))
    return buf.getvalue()


def decode(api_key: int, version: int, response: bytes, corr: int = 7):
    cls = response_class(api_key, version)
    assert struct.unpack(">i", response[:4])[0] == len(response) - 4
    header_cls = ResponseHeaderV1 if cls.__flexible__ else ResponseHeaderV0
    header, used = entity_reader(header_cls)(response, 4)  # kio returns the bytes it read
    assert header.correlation_id == corr
    body, _ = entity_reader(cls)(response, 4 + used)
    return body


def handshake(session: SaslSession, mechanism: str, version: int = 1):
    answer = session.receive(frame(SASL_HANDSHAKE, version, mechanism=mechanism))
    assert answer is not None and answer.api_key == SASL_HANDSHAKE
    return answer, decode(SASL_HANDSHAKE, version, answer.response)


def authenticate(session: SaslSession, token: bytes, version: int = 2):
    answer = session.receive(frame(SASL_AUTHENTICATE, version, auth_bytes=token))
    assert answer is not None and answer.api_key == SASL_AUTHENTICATE
    return answer, decode(SASL_AUTHENTICATE, version, answer.response)


def test_api_versions_before_the_handshake_is_served_normally(session):
    assert session.receive(frame(API_VERSIONS, 0)) is None
    assert (
        session.receive(
            frame(API_VERSIONS, 3, client_software_name="x", client_software_version="1")
        )
        is None
    )
    assert not session.authenticated


@pytest.mark.parametrize(
    "first",
    [
        frame(METADATA, 1, topics=None),
        frame(SASL_AUTHENTICATE, 2, auth_bytes=b"\0alice\0alice-pw"),
    ],
    ids=["Metadata", "SaslAuthenticate before SaslHandshake"],
)
def test_other_requests_before_authentication_close_the_connection(session, first):
    with pytest.raises(ProtocolError, match="before SASL authentication completed"):
        session.receive(first)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_with_the_right_password_authenticates(session, version):
    answer, body = handshake(session, "PLAIN")
    assert body.error_code == ErrorCode.none and not answer.close
    assert set(body.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert session.state is SaslState.AUTHENTICATE
    answer, body = authenticate(session, b"\0alice\0alice-pw", version)
    assert body.error_code == ErrorCode.none and body.auth_bytes == b"" and not answer.close
    assert session.authenticated


@pytest.mark.parametrize(
    "token",
    [
        b"\0alice\0bob-pw",
        b"\0mallory\0alice-pw",
        b"\0\0alice-pw",
        b"bob\0alice\0alice-pw",
        b"alice-pw",
    ],
    ids=["wrong password", "unknown user", "no user", "other authzid", "not 3 tokens"],
)
def test_plain_failures_answer_58_with_a_message_and_close(session, token):
    handshake(session, "PLAIN")
    answer, body = authenticate(session, token)
    assert body.error_code == ErrorCode.sasl_authentication_failed
    assert body.error_message and "alice-pw" not in body.error_message
    assert answer.close and answer.delay_s == FAILED_AUTHENTICATION_DELAY_S
    assert not session.authenticated


@pytest.mark.parametrize(
    ("mechanism", "hash_name"), [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")]
)
def test_scram_takes_two_authenticate_round_trips(session, mechanism, hash_name):
    handshake(session, mechanism)
    first = b"n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL"
    answer, body = authenticate(session, first)
    assert body.error_code == ErrorCode.none and not session.authenticated
    final, expected = client_final(hash_name, "bob-pw", first, body.auth_bytes)
    answer, body = authenticate(session, final)
    assert body.error_code == ErrorCode.none and body.auth_bytes == expected
    assert session.authenticated and not answer.close


def test_scram_with_a_wrong_password_fails_on_the_final_message(session):
    handshake(session, "SCRAM-SHA-512")
    first = b"n,,n=bob,r=abc"
    _, body = authenticate(session, first)
    final, _ = client_final("sha512", "alice-pw", first, body.auth_bytes)
    answer, body = authenticate(session, final)
    assert body.error_code == ErrorCode.sasl_authentication_failed
    assert "SCRAM-SHA-512" in body.error_message and answer.close


def test_an_unknown_mechanism_is_answered_33_with_the_enabled_ones_and_closes(session):
    answer, body = handshake(session, "GSSAPI")
    assert body.error_code == ErrorCode.unsupported_sasl_mechanism
    assert "SCRAM-SHA-256" in body.mechanisms and answer.close


def test_a_mechanism_the_listener_does_not_enable_is_refused():
    security = ListenerSecurity(
        protocol="SASL_SSL",
        users=USERS,
        mechanisms=("SCRAM-SHA-512",),
        certfile=__file__,
        keyfile=__file__,
    )
    session = SaslSession(Credentials(security), "peer")
    answer, body = handshake(session, "PLAIN")
    assert body.error_code == ErrorCode.unsupported_sasl_mechanism
    assert list(body.mechanisms) == ["SCRAM-SHA-512"] and answer.close


def test_during_the_exchange_only_sasl_authenticate_is_accepted(session):
    handshake(session, "PLAIN")
    for request in (
        frame(API_VERSIONS, 0),
        frame(SASL_HANDSHAKE, 1, mechanism="PLAIN"),
        frame(METADATA, 1, topics=None),
    ):
        with pytest.raises(ProtocolError):
            session.receive(request)


def test_unsupported_versions_of_the_sasl_apis_close_the_connection(session):
    bad = struct.pack(">hhi", SASL_HANDSHAKE, 2, 1) + b"\x00\x00"
    with pytest.raises(ProtocolError, match="unsupported version 2 of SaslHandshake"):
        session.receive(bad)


def test_handshake_v0_exchanges_bare_tokens(session):
    answer, body = handshake(session, "SCRAM-SHA-256", version=0)
    assert body.error_code == ErrorCode.none and session.state is SaslState.RAW_TOKENS
    first = b"n,,n=alice,r=nonce0"
    answer = session.receive(first)
    assert answer is not None and answer.api_key is None and not answer.close
    size = struct.unpack(">i", answer.response[:4])[0]
    server_first = answer.response[4:]
    assert size == len(server_first) and server_first.startswith(b"r=nonce0")
    final, expected = client_final("sha256", "alice-pw", first, server_first)
    answer = session.receive(final)
    assert answer.response == struct.pack(">i", len(expected)) + expected
    assert session.authenticated


def test_handshake_v0_with_a_wrong_password_just_closes(session):
    handshake(session, "PLAIN", version=0)
    answer = session.receive(b"\0alice\0nope")
    assert answer is not None and answer.response is None and answer.close
    assert not session.authenticated


def test_the_credentials_hold_no_password(credentials):
    dumped = pickle.dumps(credentials.__dict__)
    for password in USERS.values():
        assert password.encode() not in dumped
    assert credentials.plain_matches("alice", "alice-pw")
    assert not credentials.plain_matches("alice", "bob-pw")
    assert not credentials.plain_matches("carol", "alice-pw")
