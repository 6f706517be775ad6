"""Throwaway TLS certificates for tests and the demo, made when asked (nothing committed).

:func:`make_tls_files` writes a fresh certificate authority, a server certificate for the
loopback names and a client certificate, all made by ``trustme`` (the ``dev`` extra,
imported only when called), as PEM files in a directory the caller owns. Use them for a
TLS listener of minikafka (``minikafka.ListenerSecurity(certfile=..., keyfile=...)``) and
for the clients (``ssl.ca.location``). Never for anything but tests: the CA's key lives
only in this process's memory and is dropped, and nothing checks revocation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from connectors._extras import require

# The names a loopback broker is reached by: librdkafka checks the server certificate's
# names against the bootstrap host (ssl.endpoint.identification.algorithm=https).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
CLIENT_IDENTITY = "eos-test-client"


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsFiles:
    """Paths of the PEM files :func:`make_tls_files` wrote.

    Attributes:
        ca_file: the test CA's certificate, what clients trust (``ssl.ca.location``).
        cert_file / key_file: the server's certificate chain and private key.
        client_cert_file / client_key_file: a client certificate signed by the same CA
            (``ssl.certificate.location`` / ``ssl.key.location``), for listeners that
            require one.

    """

    ca_file: str
    cert_file: str
    key_file: str
    client_cert_file: str
    client_key_file: str


def make_tls_files(directory: str | Path, hosts: tuple[str, ...] = LOOPBACK_HOSTS) -> TlsFiles:
    """Write a new CA, a server certificate for ``hosts`` and a client certificate.

    ``directory`` must exist; the files are named ``ca.pem``, ``server.pem``,
    ``server.key``, ``client.pem`` and ``client.key`` (keys readable by the owner only).
    """
    trustme = require("trustme", extra="dev", needed_for="test TLS certificates")
    base = Path(directory)
    ca = trustme.CA()
    server = ca.issue_cert(*hosts)
    client = ca.issue_cert(CLIENT_IDENTITY)
    files = TlsFiles(
        ca_file=str(base / "ca.pem"),
        cert_file=str(base / "server.pem"),
        key_file=str(base / "server.key"),
        client_cert_file=str(base / "client.pem"),
        client_key_file=str(base / "client.key"),
    )
    ca.cert_pem.write_to_path(files.ca_file)
    for leaf, cert_file, key_file in (
        (server, files.cert_file, files.key_file),
        (client, files.client_cert_file, files.client_key_file),
    ):
        Path(key_file).touch(mode=0o600)
        leaf.private_key_pem.write_to_path(key_file)
        Path(cert_file).write_bytes(b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
    return files
