"""The TLS side of an ``SSL`` or ``SASL_SSL`` listener (Python's :mod:`ssl`).

TLS 1.2 or newer, the certificate chain and key of :class:`ListenerSecurity`, and, when
``client_cafile`` is set, client certificates required and checked against it (Kafka's
``ssl.client.auth=required``). A client that does not speak TLS fails the handshake and
is disconnected before any Kafka request is read.
"""

from __future__ import annotations

import ssl

from ._errors import BrokerConfigError
from ._security import ListenerSecurity

# Seconds a client has to complete the TLS handshake before it is disconnected.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


def server_context(security: ListenerSecurity) -> ssl.SSLContext | None:
    """Return the listener's server-side SSL context, or None for a listener without TLS."""
    if not security.uses_tls:
        return None
    assert security.certfile is not None and security.keyfile is not None  # noqa: S101 - validated
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(security.certfile, security.keyfile)
        if security.client_cafile is not None:
            context.load_verify_locations(cafile=security.client_cafile)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        msg = f"cannot load the listener's TLS certificate, key or client CA: {exc}"
        raise BrokerConfigError(msg) from exc
    return context
