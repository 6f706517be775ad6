"""The raw scan's connection to a broker, secured as the cluster's ``client_config`` says.

The checker's raw Fetch reader (``_wire``) opens its own sockets, so it does what librdkafka
does for every other client of the kit, from the same librdkafka settings:

1. ``security.protocol`` ``SSL`` / ``SASL_SSL``: TLS through Python's ``ssl``, from
   ``ssl.ca.location`` (file or directory) or ``ssl.ca.pem`` (else the system's CAs), the
   client certificate ``ssl.certificate.location`` / ``ssl.key.location`` /
   ``ssl.key.password`` (or their ``.pem`` forms), ``enable.ssl.certificate.verification``
   and ``ssl.endpoint.identification.algorithm`` (``https``, librdkafka's default: the
   broker's host name is verified; ``none``: not);
2. ``SASL_PLAINTEXT`` / ``SASL_SSL``: SaslHandshake v1 then SaslAuthenticate v1 with
   ``sasl.mechanism`` ``PLAIN`` or ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802, the
   server's signature verified), ``sasl.username`` / ``sasl.password``.

Not spoken (a :class:`WireError` says so, naming the setting): GSSAPI (Kerberos) and
OAUTHBEARER, PKCS#12 keystores (``ssl.keystore.location``). A refused authentication is
:class:`connectors.kafka.KafkaCode.AUTHENTICATION`, as for the kit's other clients.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import socket
import ssl
import struct
import tempfile
from collections.abc import Mapping

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._client import Cluster, fix_authentication
from connectors.verify._errors import WireError

_API_SASL_HANDSHAKE = 17
_API_SASL_AUTHENTICATE = 36
_SASL_VERSION = 1
_CLIENT_ID = b"eos-verify"
# Kafka's error codes of a refused SASL exchange.
_UNSUPPORTED_SASL_MECHANISM = 33
_SASL_AUTHENTICATION_FAILED = 58
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_MECHANISMS = ("PLAIN", *_SCRAM_HASHES)
_FALSE = ("false", "0", "no", "none")


def open_broker(host: str, port: int, cluster: Cluster, timeout_s: float) -> socket.socket:
    """Return a connection to broker ``host:port``, secured and authenticated (module doc).

    Raises:
        WireError: a setting the raw scan does not speak, or a malformed broker answer.
        KafkaCode.AUTHENTICATION: the broker refused the credentials.

    """
    protocol = cluster.security_protocol
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        msg = f"security.protocol={protocol!r} in {cluster.config_option} is not a Kafka protocol"
        raise WireError(msg)
    settings = cluster.config.as_dict()
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI"))
    if protocol.startswith("SASL_") and mechanism.upper() not in _MECHANISMS:
        msg = (
            f"the checker's raw scan speaks SASL {', '.join(_MECHANISMS)} only, not "
            f"sasl.mechanism={mechanism} ({cluster.config_option}); run it against a "
            "listener with one of those (docs/deploying.md, 'Secured clusters')"
        )
        raise WireError(msg)
    sock = socket.create_connection((host, port), timeout_s)
    try:
        sock.settimeout(timeout_s)
        if protocol.endswith("SSL"):
            sock = tls_context(settings).wrap_socket(sock, server_hostname=host)
        if protocol.startswith("SASL_"):
            _authenticate(sock, mechanism.upper(), settings, cluster, f"{host}:{port}")
    except BaseException:
        sock.close()
        raise
    return sock


def tls_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """Return the TLS context librdkafka's ``ssl.*`` ``settings`` describe (module doc)."""
    if settings.get("ssl.keystore.location"):
        msg = (
            "the checker's raw scan reads PEM files, not a PKCS#12 keystore "
            "(ssl.keystore.location): give ssl.certificate.location and ssl.key.location"
        )
        raise WireError(msg)
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca = settings.get("ssl.ca.location", "")
    if ca and ca != "probe" and os.path.isdir(ca):
        ctx.load_verify_locations(capath=ca)
    elif ca and ca != "probe":
        ctx.load_verify_locations(cafile=ca)
    if settings.get("ssl.ca.pem"):
        ctx.load_verify_locations(cadata=settings["ssl.ca.pem"])
    _load_client_certificate(ctx, settings)
    if settings.get("enable.ssl.certificate.verification", "true").lower() in _FALSE:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif settings.get("ssl.endpoint.identification.algorithm", "https").lower() in _FALSE:
        ctx.check_hostname = False
    if settings.get("ssl.cipher.suites"):
        ctx.set_ciphers(settings["ssl.cipher.suites"])
    return ctx


def _load_client_certificate(ctx: ssl.SSLContext, settings: Mapping[str, str]) -> None:
    password = settings.get("ssl.key.password") or None
    cert, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if cert:
        ctx.load_cert_chain(cert, key or None, password)
        return
    cert_pem, key_pem = settings.get("ssl.certificate.pem"), settings.get("ssl.key.pem")
    if not cert_pem:
        return
    with tempfile.TemporaryDirectory() as tmp:  # ssl loads a chain from files only
        paths = []
        for name, text in (("cert.pem", cert_pem), ("key.pem", key_pem)):
            if text:
                path = os.path.join(tmp, name)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                paths.append(path)
        ctx.load_cert_chain(paths[0], paths[1] if len(paths) > 1 else None, password)


def _authenticate(
    sock: socket.socket,
    mechanism: str,
    settings: Mapping[str, str],
    cluster: Cluster,
    broker: str,
) -> None:
    """SaslHandshake, then the mechanism's SaslAuthenticate exchange(s)."""
    name = mechanism.encode()
    body = _request(sock, _API_SASL_HANDSHAKE, 1, struct.pack(">h", len(name)) + name)
    (error,) = struct.unpack_from(">h", body, 0)
    if error:
        _refused(cluster, broker, f"the broker does not enable {mechanism} (error {error})")
    user, password = settings.get("sasl.username", ""), settings.get("sasl.password", "")
    if mechanism == "PLAIN":
        _exchange(sock, 2, b"\0" + user.encode() + b"\0" + password.encode(), (cluster, broker))
        return
    scram = Scram(_SCRAM_HASHES[mechanism], user, password)
    server_first = _exchange(sock, 2, scram.client_first(), (cluster, broker))
    server_final = _exchange(sock, 3, scram.client_final(server_first), (cluster, broker))
    if not scram.verify(server_final):
        _refused(cluster, broker, "the broker's SCRAM signature does not match")


def _exchange(
    sock: socket.socket, correlation: int, payload: bytes, where: tuple[Cluster, str]
) -> bytes:
    """Send one SaslAuthenticate v1; return the broker's auth bytes."""
    request = struct.pack(">i", len(payload)) + payload
    body = _request(sock, _API_SASL_AUTHENTICATE, correlation, request)
    error, text_len = struct.unpack_from(">hh", body, 0)
    pos = 4 + max(text_len, 0)
    text = body[4:pos].decode(errors="replace") if text_len > 0 else ""
    if error:
        _refused(*where, f"error {error}: {text}")
    (size,) = struct.unpack_from(">i", body, pos)
    return body[pos + 4 : pos + 4 + max(size, 0)]


def _refused(cluster: Cluster, broker: str, why: str) -> None:
    msg = (
        f"authentication failed: the broker {broker} refused the checker's raw scan "
        f"({why}); {fix_authentication(cluster.config_option)}"
    )
    raise KafkaConnectorError(
        msg,
        address=cluster.bootstrap_servers,
        setting=cluster.config_option,
        code=KafkaCode.AUTHENTICATION,
    )


def _request(sock: socket.socket, api_key: int, correlation: int, body: bytes) -> bytes:
    """Send one request (header v1) and return its response body (after the correlation id)."""
    header = struct.pack(">hhih", api_key, _SASL_VERSION, correlation, len(_CLIENT_ID))
    request = header + _CLIENT_ID + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    data = recv_exact(sock, size)
    (got,) = struct.unpack_from(">i", data, 0)
    if got != correlation:
        msg = f"unexpected SASL response (correlation {got}, expected {correlation})"
        raise WireError(msg)
    return data[4:]


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Read exactly ``size`` bytes, or raise :class:`WireError` when the broker hangs up."""
    chunks: list[bytes] = []
    while size > 0:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            msg = "the broker closed the connection during a request"
            raise WireError(msg)
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class Scram:
    """The client side of one SCRAM exchange (RFC 5802; SHA-256 / SHA-512, RFC 7677)."""

    def __init__(self, hash_name: str, user: str, password: str, nonce: str | None = None):
        self._hash = hash_name
        self._password = password.encode()
        self._nonce = nonce or secrets.token_urlsafe(24)
        name = user.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={name},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def client_first(self) -> bytes:
        """Return the client-first message (no channel binding)."""
        return f"n,,{self._first_bare}".encode()

    def client_final(self, server_first: bytes) -> bytes:
        """Return the client-final message with the proof, from the server-first message."""
        attrs = dict(p.split("=", 1) for p in server_first.decode().split(",") if "=" in p)
        nonce = attrs.get("r", "")
        if not nonce.startswith(self._nonce) or "s" not in attrs or "i" not in attrs:
            msg = "malformed SCRAM server-first message"
            raise WireError(msg)
        self._salted = hashlib.pbkdf2_hmac(
            self._hash, self._password, base64.b64decode(attrs["s"]), int(attrs["i"])
        )
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        client_key = self._hmac(self._salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = self._hmac(stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        """Return whether the server-final message proves the server knows the password."""
        text = server_final.decode(errors="replace")
        if not text.startswith("v="):
            return False
        server_key = self._hmac(self._salted, b"Server Key")
        expected = self._hmac(server_key, self._auth_message)
        return hmac.compare_digest(base64.b64decode(text[2:]), expected)

    def _hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self._hash).digest()
