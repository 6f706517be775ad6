"""SaslHandshake and SaslAuthenticate once a connection needs no more authentication.

Before authentication a SASL listener's connection session consumes these requests
(:mod:`minikafka._sasl`); what reaches the handlers is a request on a PLAINTEXT or SSL
listener, or one after authentication completed. Kafka answers both ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from .._sasl import (
    AUTHENTICATE_VERSIONS,
    HANDSHAKE_VERSIONS,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
)
from ._base import Data, RequestContext, register


@register(SASL_HANDSHAKE_KEY, "SaslHandshake", *HANDSHAKE_VERSIONS)
def sasl_handshake(_ctx: RequestContext, _req: Any) -> Data:
    """Answer ILLEGAL_SASL_STATE: no handshake is expected on this connection now."""
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}


@register(SASL_AUTHENTICATE_KEY, "SaslAuthenticate", *AUTHENTICATE_VERSIONS)
def sasl_authenticate(_ctx: RequestContext, _req: Any) -> Data:
    """Answer ILLEGAL_SASL_STATE: the connection is not in a SASL exchange."""
    return {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": "SaslAuthenticate request received after successful authentication "
        "or on a listener without SASL",
    }
