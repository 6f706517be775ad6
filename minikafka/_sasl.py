"""SASL on a listener: the stored credentials and each connection's authentication state.

Protocol (KIP-43, KIP-152), as Kafka's ``SaslServerAuthenticator`` runs it:

1. Before authentication a connection may send ApiVersions (any number of times) and
   then one SaslHandshake naming a mechanism. A mechanism the listener does not enable
   is answered UNSUPPORTED_SASL_MECHANISM with the enabled list, and the connection closes.
2. After SaslHandshake v1 the client sends its SASL tokens in SaslAuthenticate requests;
   after SaslHandshake v0 it sends them as bare length-prefixed frames (no request header)
   and gets bare frames back.
3. Wrong credentials or a malformed token: SaslAuthenticate is answered
   SASL_AUTHENTICATION_FAILED (58) with a message and the connection closes (v0: the
   connection just closes). librdkafka reports this as ``_AUTHENTICATION``.
4. Any other request before authentication completes closes the connection.
5. Once authenticated, every request is served as on a PLAINTEXT listener (a further
   SaslHandshake or SaslAuthenticate is answered ILLEGAL_SASL_STATE, as Kafka answers).

Passwords are never logged; failures are logged (INFO, as Kafka does) with the user name
and the peer, and answered after ``FAILED_AUTHENTICATION_DELAY_S``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ._errors import ProtocolError
from ._protocol import (
    API_VERSIONS_KEY,
    build_response,
    encode_response,
    parse_request,
    peek_key_version,
)
from ._scram import (
    HASHES,
    AuthenticationFailed,
    ScramCredential,
    ScramServer,
    derive_credential,
    password_matches,
)
from ._security import ListenerSecurity

log = logging.getLogger("minikafka.sasl")

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)
# The hash whose stored credential a PLAIN password is checked against.
PLAIN_HASH = "sha256"
# Seconds a failed authentication's answer (and the close) is held back, so a client
# retrying with wrong credentials cannot spin: Kafka's connection.failed.authentication.delay.ms.
FAILED_AUTHENTICATION_DELAY_S = 0.1


class SaslState(enum.Enum):
    """Where one connection is in the exchange (see the module docstring)."""

    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"  # tokens in SaslAuthenticate requests (handshake v1)
    RAW_TOKENS = "raw tokens"  # tokens as bare frames (handshake v0)
    COMPLETE = "complete"


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAnswer:
    """What the server does with a frame the SASL gate consumed."""

    response: bytes | None  # length-prefixed bytes to send, if any
    close: bool  # close the connection after sending
    api_key: int | None  # the request's API key (for the request counter), None for raw tokens
    delay_s: float = 0.0  # wait this long before sending (a failed authentication)


class Credentials:
    """The salted credentials of a SASL listener's users (derived once, at broker start)."""

    def __init__(self, security: ListenerSecurity) -> None:
        self.mechanisms = security.mechanisms
        hashes = {HASHES[m] for m in security.mechanisms if m in HASHES}
        if "PLAIN" in security.mechanisms:
            hashes.add(PLAIN_HASH)
        self._store: dict[tuple[str, str], ScramCredential] = {
            (user, h): derive_credential(h, password, security.scram_iterations)
            for user, password in security.users.items()
            for h in sorted(hashes)
        }

    def scram(self, hash_name: str) -> Callable[[str], ScramCredential | None]:
        """Lookup of one hash's credential by user name."""
        return lambda user: self._store.get((user, hash_name))

    def plain_matches(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (checked against the stored salted credential)."""
        credential = self._store.get((user, PLAIN_HASH))
        return credential is not None and password_matches(PLAIN_HASH, credential, password)


class _Plain:
    """SASL/PLAIN (RFC 4616): one token ``authzid NUL user NUL password``."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self.username: str | None = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            msg = "Invalid SASL/PLAIN response: expected 3 tokens"
            raise AuthenticationFailed(msg)
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError as exc:
            msg = "Invalid SASL/PLAIN response: not UTF-8"
            raise AuthenticationFailed(msg) from exc
        self.username = user
        if authzid and authzid != user:
            msg = "Authentication failed: Client requested an authorization id that is different from username"
            raise AuthenticationFailed(msg)
        if not user or not self._credentials.plain_matches(user, password):
            msg = "Authentication failed: Invalid username or password"
            raise AuthenticationFailed(msg)
        return b"", True


class _Scram:
    """SCRAM as a two-step exchange over :class:`minikafka._scram.ScramServer`."""

    def __init__(self, mechanism: str, credentials: Credentials) -> None:
        self._server = ScramServer(mechanism, credentials.scram(HASHES[mechanism]))
        self._first_done = False

    @property
    def username(self) -> str | None:
        return self._server.username

    def step(self, token: bytes) -> tuple[bytes, bool]:
        if not self._first_done:
            self._first_done = True
            return self._server.first(token), False
        return self._server.final(token), True


class SaslSession:
    """The authentication state of one connection (see the module docstring)."""

    def __init__(self, credentials: Credentials, peer: str) -> None:
        self._credentials = credentials
        self._peer = peer
        self.state = SaslState.HANDSHAKE
        self._exchange: _Plain | _Scram | None = None
        self._mechanism = ""

    @property
    def authenticated(self) -> bool:
        """Whether the connection completed SASL authentication."""
        return self.state is SaslState.COMPLETE

    def receive(self, frame: bytes) -> SaslAnswer | None:
        """Consume one frame before authentication; None means "serve it normally".

        Raises :class:`ProtocolError` (the server closes the connection) for a request
        that is not allowed in the current state.
        """
        if self.state is SaslState.RAW_TOKENS:
            return self._raw_token(frame)
        key, version, _ = peek_key_version(frame)
        if key == API_VERSIONS_KEY and self.state is SaslState.HANDSHAKE:
            return None
        if key == SASL_HANDSHAKE_KEY and self.state is SaslState.HANDSHAKE:
            _check_version("SaslHandshake", version, HANDSHAKE_VERSIONS)
            return self._handshake(frame, version)
        if key == SASL_AUTHENTICATE_KEY and self.state is SaslState.AUTHENTICATE:
            _check_version("SaslAuthenticate", version, AUTHENTICATE_VERSIONS)
            return self._authenticate(frame, version)
        msg = f"request of API key {key} before SASL authentication completed (state: {self.state.value})"
        raise ProtocolError(msg)

    def _handshake(self, frame: bytes, version: int) -> SaslAnswer:
        header, req = parse_request(frame, SASL_HANDSHAKE_KEY, version)
        enabled = list(self._credentials.mechanisms)
        if req.mechanism not in enabled:
            log.warning(
                "SASL mechanism %r from %s is not enabled (enabled: %s); closing",
                req.mechanism,
                self._peer,
                enabled,
            )
            data = {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled}
            return self._answer(SASL_HANDSHAKE_KEY, version, header, data, close=True)
        self._mechanism = req.mechanism
        if req.mechanism == "PLAIN":
            self._exchange = _Plain(self._credentials)
        else:
            self._exchange = _Scram(req.mechanism, self._credentials)
        self.state = SaslState.AUTHENTICATE if version >= 1 else SaslState.RAW_TOKENS
        data = {"error_code": ErrorCode.none, "mechanisms": enabled}
        return self._answer(SASL_HANDSHAKE_KEY, version, header, data, close=False)

    def _authenticate(self, frame: bytes, version: int) -> SaslAnswer:
        header, req = parse_request(frame, SASL_AUTHENTICATE_KEY, version)
        try:
            token, _ = self._step(req.auth_bytes)
        except AuthenticationFailed as exc:
            data = {
                "error_code": ErrorCode.sasl_authentication_failed,
                "error_message": str(exc),
            }
            failed = self._answer(SASL_AUTHENTICATE_KEY, version, header, data, close=True)
            return dataclasses.replace(failed, delay_s=FAILED_AUTHENTICATION_DELAY_S)
        data = {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": token}
        return self._answer(SASL_AUTHENTICATE_KEY, version, header, data, close=False)

    def _raw_token(self, frame: bytes) -> SaslAnswer:
        try:
            token, _ = self._step(frame)
        except AuthenticationFailed:
            return SaslAnswer(
                response=None, close=True, api_key=None, delay_s=FAILED_AUTHENTICATION_DELAY_S
            )
        return SaslAnswer(response=len(token).to_bytes(4, "big") + token, close=False, api_key=None)

    def _step(self, token: bytes) -> tuple[bytes, bool]:
        """One mechanism step; logs and re-raises a failure, marks success complete."""
        exchange = self._exchange
        assert exchange is not None  # noqa: S101 - set by the handshake that moved the state on
        try:
            answer, done = exchange.step(token)
        except AuthenticationFailed as exc:
            log.info(
                "SASL %s authentication of user %r from %s failed: %s",
                self._mechanism,
                exchange.username,
                self._peer,
                exc,
            )
            raise
        if done:
            self.state = SaslState.COMPLETE
            log.info(
                "SASL %s: user %r from %s authenticated",
                self._mechanism,
                exchange.username,
                self._peer,
            )
        return answer, done

    @staticmethod
    def _answer(
        key: int, version: int, header: object, data: dict[str, object], *, close: bool
    ) -> SaslAnswer:
        corr = int(getattr(header, "correlation_id", 0))
        response = encode_response(key, corr, build_response(key, version, data))
        return SaslAnswer(response=response, close=close, api_key=key)


def _check_version(name: str, version: int, versions: tuple[int, int]) -> None:
    if not versions[0] <= version <= versions[1]:
        msg = f"unsupported version {version} of {name} (supported {versions[0]}..{versions[1]})"
        raise ProtocolError(msg)
