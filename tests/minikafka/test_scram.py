"""SCRAM math and the server side of one exchange (RFC 5802, RFC 7677)."""

import base64
import hashlib
import hmac
import pickle

import pytest

from minikafka._scram import (
    AuthenticationFailed,
    ScramCredential,
    ScramServer,
    derive_credential,
    password_matches,
)

# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def client_final(
    hash_name: str, password: str, client_first: bytes, server_first: bytes
) -> tuple[bytes, bytes]:
    """A SCRAM client's final message and the server signature it expects (RFC 5802 s3)."""
    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    gs2, bare = client_first.decode()[:3], client_first.decode()[3:]
    without_proof = f"c={base64.b64encode(gs2.encode()).decode()},r={attrs['r']}"
    auth = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, hash_name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    expected = b"v=" + base64.b64encode(hmac.new(server_key, auth, hash_name).digest())
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), expected


def rfc_server() -> ScramServer:
    credential = derive_credential("sha256", "pencil", 4096, RFC7677_SALT)
    return ScramServer(
        "SCRAM-SHA-256",
        lambda user: credential if user == "user" else None,
        server_nonce=lambda: RFC7677_SERVER_NONCE,
    )


def test_the_rfc_7677_exchange_byte_for_byte():
    server = rfc_server()
    assert server.first(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert server.final(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.username == "user"


def test_the_test_client_reproduces_the_rfc_7677_proof():
    final, expected = client_final("sha256", "pencil", RFC7677_CLIENT_FIRST, RFC7677_SERVER_FIRST)
    assert final == RFC7677_CLIENT_FINAL
    assert expected == RFC7677_SERVER_FINAL


@pytest.mark.parametrize(
    ("mechanism", "hash_name"), [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")]
)
def test_a_full_exchange_with_a_random_salt_and_nonce(mechanism, hash_name):
    credential = derive_credential(hash_name, "s3cret,=pw", 4096)
    server = ScramServer(mechanism, {"al,ice": credential}.get)
    first = b"n,,n=al=2Cice,r=clientnonce"
    server_first = server.first(first)
    assert server_first.startswith(b"r=clientnonce") and len(server_first) > len(b"r=clientnonce")
    final, expected = client_final(hash_name, "s3cret,=pw", first, server_first)
    assert server.final(final) == expected
    assert server.username == "al,ice"


def test_a_wrong_password_fails_at_the_final_message():
    server = rfc_server()
    server_first = server.first(RFC7677_CLIENT_FIRST)
    final, _ = client_final("sha256", "pencil2", RFC7677_CLIENT_FIRST, server_first)
    with pytest.raises(
        AuthenticationFailed, match="invalid credentials with SASL mechanism SCRAM-SHA-256"
    ):
        server.final(final)


def test_an_unknown_user_fails_at_the_first_message():
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        rfc_server().first(b"n,,n=mallory,r=abc")


@pytest.mark.parametrize(
    "first",
    [
        b"n,,r=abc",  # no user
        b"n,,n=user",  # no nonce
        b"n,,n=user,r=",  # empty nonce
        b"x,,n=user,r=abc",  # bad gs2 flag
        b"p=tls-unique,,n=user,r=abc",  # channel binding asked for
        b"n,a=admin,n=user,r=abc",  # authorization id of another user
        b"n,,n=us=er,r=abc",  # '=' not escaped
        b"n,,n=user,r=abc,tokenauth=true",  # delegation token
        b"n,,m=ext,n=user,r=abc",  # reserved mandatory extension
        b"\xff\xfe",  # not UTF-8
        b"n,,nonsense",
    ],
)
def test_malformed_client_first_messages_fail(first):
    with pytest.raises(AuthenticationFailed, match="Authentication failed"):
        rfc_server().first(first)


def test_the_same_authorization_id_as_the_user_is_accepted():
    assert rfc_server().first(b"n,a=user,n=user,r=abc").startswith(b"r=abc")


@pytest.mark.parametrize(
    "final",
    [
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO-other-nonce,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=not base64!",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=c2hvcnQ=",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    ],
    ids=["other nonce", "other channel binding", "proof not base64", "short proof", "no proof"],
)
def test_malformed_or_mismatched_client_final_messages_fail(final):
    server = rfc_server()
    server.first(RFC7677_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed):
        server.final(final)


def test_a_final_message_before_the_first_fails():
    with pytest.raises(AuthenticationFailed, match="before client-first"):
        rfc_server().final(RFC7677_CLIENT_FINAL)


def test_the_stored_credential_holds_no_password_and_checks_one():
    credential = derive_credential("sha512", "pencil", 4096)
    assert isinstance(credential, ScramCredential)
    assert b"pencil" not in pickle.dumps(credential)
    assert "pencil" not in repr(credential) and credential.stored_key.hex() not in repr(credential)
    assert password_matches("sha512", credential, "pencil")
    assert not password_matches("sha512", credential, "pencil ")
    # two derivations of one password differ (fresh salt) but both check it
    again = derive_credential("sha512", "pencil", 4096)
    assert again.salt != credential.salt and again.stored_key != credential.stored_key
    assert password_matches("sha512", again, "pencil")
