"""SCRAM (RFC 5802) with SHA-256 and SHA-512 (RFC 7677): stored credentials and the server side.

The broker stores, per user and hash, only Kafka's ``ScramCredential``: salt, iteration
count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"), with SaltedPassword = PBKDF2(password, salt, i). A
client proves it knows the password without sending it; the server proves it holds the
credential. No channel binding (gs2 flag ``n`` or ``y``), no SASLprep (passwords are used
as their UTF-8 bytes), no delegation tokens (``tokenauth`` extension refused).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from ._errors import MiniKafkaError

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Random bytes of the server's part of the nonce (base64-encoded on the wire).
SERVER_NONCE_BYTES = 24
# Random bytes of a stored credential's salt.
SALT_BYTES = 16


class AuthenticationFailed(MiniKafkaError):
    """The client's SASL exchange failed; the message is safe to send back and to log."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScramCredential:
    """What the broker stores for one user and one hash (never the password)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations}, keys hidden)"


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) of RFC 5802, i.e. PBKDF2-HMAC."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def client_key(hash_name: str, salted: bytes) -> bytes:
    """ClientKey = HMAC(SaltedPassword, "Client Key")."""
    return _hmac(hash_name, salted, b"Client Key")


def derive_credential(
    hash_name: str, password: str, iterations: int, salt: bytes | None = None
) -> ScramCredential:
    """Derive the stored credential of ``password`` (a fresh random salt unless given)."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    salted = salted_password(hash_name, password, salt, iterations)
    stored = hashlib.new(hash_name, client_key(hash_name, salted)).digest()
    return ScramCredential(
        salt=salt,
        iterations=iterations,
        stored_key=stored,
        server_key=_hmac(hash_name, salted, b"Server Key"),
    )


def password_matches(hash_name: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` derives ``credential`` (constant-time comparison)."""
    again = derive_credential(hash_name, password, credential.iterations, credential.salt)
    return hmac.compare_digest(again.stored_key, credential.stored_key)


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            msg = f"Authentication failed: malformed SCRAM {what} message"
            raise AuthenticationFailed(msg)
        pairs.append((key, value))
    return pairs


def _unescape_name(saslname: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        msg = "Authentication failed: malformed SCRAM user name"
        raise AuthenticationFailed(msg)
    return saslname.replace("=2C", ",").replace("=3D", "=")


CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """The server side of one SCRAM exchange: two client messages, two answers.

    Contract: :meth:`first` takes client-first-message and returns server-first-message;
    :meth:`final` takes client-final-message and returns server-final-message when the
    proof is right. Any malformed message, unknown user or wrong proof raises
    :class:`AuthenticationFailed` (Kafka answers SASL_AUTHENTICATION_FAILED and closes).
    """

    def __init__(
        self,
        mechanism: str,
        lookup: CredentialLookup,
        *,
        server_nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.hash_name = HASHES[mechanism]
        self._lookup = lookup
        self._server_nonce = server_nonce or _random_nonce
        self.username: str | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    def first(self, message: bytes) -> bytes:
        """Answer client-first-message (``n,,n=user,r=nonce``) with server-first-message."""
        text = _decode(message)
        flag, authzid, bare = _split_gs2(text)
        if flag.startswith("p="):
            msg = "Authentication failed: SCRAM channel binding is not supported"
            raise AuthenticationFailed(msg)
        attrs = _attributes(bare, "client-first")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            msg = "Authentication failed: malformed SCRAM client-first message"
            raise AuthenticationFailed(msg)
        if any(k == "m" for k, _ in attrs) or ("tokenauth", "true") in attrs:
            msg = "Authentication failed: SCRAM extensions (delegation tokens) are not supported"
            raise AuthenticationFailed(msg)
        user = _unescape_name(attrs[0][1])
        if authzid and authzid != user:
            msg = "Authentication failed: the authorization id differs from the user name"
            raise AuthenticationFailed(msg)
        self.username = user
        credential = self._lookup(user)
        if credential is None:
            raise AuthenticationFailed(_invalid_credentials(self.mechanism))
        self._credential = credential
        self._gs2_header = text[: len(text) - len(bare)]
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + self._server_nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        """Check client-final-message's proof; answer server-final-message (``v=...``)."""
        if self._credential is None:
            msg = "Authentication failed: SCRAM client-final message before client-first"
            raise AuthenticationFailed(msg)
        text = _decode(message)
        attrs = _attributes(text, "client-final")
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            msg = "Authentication failed: malformed SCRAM client-final message"
            raise AuthenticationFailed(msg)
        binding = base64.b64encode(self._gs2_header.encode()).decode()
        if attrs[0][1] != binding or attrs[1][1] != self._nonce:
            msg = "Authentication failed: SCRAM channel binding or nonce does not match"
            raise AuthenticationFailed(msg)
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except ValueError as exc:
            raise AuthenticationFailed(_invalid_credentials(self.mechanism)) from exc
        cred = self._credential
        signature = _hmac(self.hash_name, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed(_invalid_credentials(self.mechanism))
        key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash_name, key).digest(), cred.stored_key):
            raise AuthenticationFailed(_invalid_credentials(self.mechanism))
        verifier = _hmac(self.hash_name, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(verifier)


def _invalid_credentials(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials "
        f"with SASL mechanism {mechanism}"
    )


def _random_nonce() -> str:
    return base64.b64encode(secrets.token_bytes(SERVER_NONCE_BYTES)).decode()


def _decode(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = "Authentication failed: a SCRAM message is not UTF-8"
        raise AuthenticationFailed(msg) from exc


def _split_gs2(text: str) -> tuple[str, str, str]:
    """(cb flag, authzid, client-first-message-bare) of a client-first-message."""
    parts = text.split(",", 2)
    if len(parts) != 3 or parts[0] not in ("n", "y") and not parts[0].startswith("p="):
        msg = "Authentication failed: malformed SCRAM gs2 header"
        raise AuthenticationFailed(msg)
    authzid = parts[1]
    if authzid and not authzid.startswith("a="):
        msg = "Authentication failed: malformed SCRAM gs2 header"
        raise AuthenticationFailed(msg)
    return parts[0], _unescape_name(authzid[2:]) if authzid else "", parts[2]
