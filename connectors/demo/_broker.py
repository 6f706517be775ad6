"""The demo's embedded minikafka broker (``__main__`` step 1), plaintext or secured.

With ``secure=True`` the broker's only listener is SASL_SSL: SCRAM-SHA-512 for one user,
:data:`DEMO_USER`, whose password is drawn for the run (this process hands it to the
broker in a users file of the broker's own temporary directory and to the app in its
environment; nothing prints it or writes it in the work directory), and TLS with
certificates of a throwaway certificate authority that
:func:`connectors.testing._tls.make_tls_files` writes into the work directory (needs the
``dev`` extra, ``trustme``). :attr:`DemoBroker.client_config` holds the settings every
client of the demo needs there; any client without them is refused, so the run shows that
every client of the kit takes them.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

# The user and SASL mechanism of the secured broker (the mechanism most clusters offer).
DEMO_USER = "eos-demo"
SECURE_PROTOCOL = "SASL_SSL"
SECURE_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class DemoBroker:
    """A running broker's address and the client settings it needs (none in plaintext)."""

    bootstrap: str
    client_config: dict[str, str] = field(default_factory=dict, repr=False)


def start_broker(stack: ExitStack, work: Path, *, secure: bool) -> DemoBroker:
    """Start the demo's broker with its data in ``work``; ``stack`` stops it.

    Raises:
        MissingExtraError: ``secure`` without ``trustme`` (the ``dev`` extra).

    """
    from minikafka import BrokerProcess, ListenerSecurity

    if not secure:
        broker = stack.enter_context(BrokerProcess(data_dir=str(work / "broker"), port=0))
        return DemoBroker(broker.bootstrap_servers)
    from connectors.testing._tls import make_tls_files

    tls_dir = work / "tls"
    tls_dir.mkdir(parents=True, exist_ok=True)
    tls = make_tls_files(tls_dir)
    password = secrets.token_urlsafe(18)
    security = ListenerSecurity(
        protocol=SECURE_PROTOCOL,
        users={DEMO_USER: password},
        mechanisms=(SECURE_MECHANISM,),
        certfile=tls.cert_file,
        keyfile=tls.key_file,
    )
    broker = stack.enter_context(
        BrokerProcess(data_dir=str(work / "broker"), port=0, security=security)
    )
    settings = {
        "security.protocol": SECURE_PROTOCOL,
        "sasl.mechanism": SECURE_MECHANISM,
        "sasl.username": DEMO_USER,
        "sasl.password": password,
        "ssl.ca.location": tls.ca_file,
    }
    return DemoBroker(broker.bootstrap_servers, settings)


def describe_security(client_config: Mapping[str, str]) -> str:
    """Say which security the clients use, from their settings (never a secret's value)."""
    protocol = client_config.get("security.protocol", "PLAINTEXT").upper()
    parts = [protocol]
    if protocol.startswith("SASL_"):
        mechanism = client_config.get("sasl.mechanism", client_config.get("sasl.mechanisms"))
        user = client_config.get("sasl.username")
        parts.append(f"SASL {mechanism or 'GSSAPI'}" + (f" as user {user!r}" if user else ""))
    if protocol.endswith("SSL"):
        ca = client_config.get("ssl.ca.location")
        parts.append(f"TLS, trusting {ca}" if ca else "TLS, trusting the system's CAs")
    if protocol == "PLAINTEXT":
        parts.append("no authentication, no encryption")
    return ", ".join(parts)
