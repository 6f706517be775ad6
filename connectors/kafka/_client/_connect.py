"""First contact with a cluster: wait (bounded) until it answers, or say exactly why not.

librdkafka never fails a request because the address is wrong: it reconnects forever and
the request times out after its own timeout, with ``_TRANSPORT`` and no address. The
sink's preflight and the source's first metadata request go through :func:`connect_admin`
instead, which:

1. sends a metadata request every ``CONNECT_STEP_S`` and collects the client's
   connection errors (librdkafka's ``error_cb``) in between;
2. returns the AdminClient as soon as the cluster answers;
3. raises :class:`KafkaCode.AUTHENTICATION` at the first authentication failure (SASL or
   TLS: retrying with the same settings cannot help), naming the settings to fix;
4. raises :class:`KafkaCode.CONNECT` after ``CONNECT_WAIT_S`` without an answer, naming
   the address, the option to fix and librdkafka's last connection error (connection
   refused, host not found) or, when nothing answered at all, the bound.
"""

from __future__ import annotations

import collections
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from connectors.kafka._client import _clients, _secrets
from connectors.kafka._client._classify import (
    AUTHENTICATION_CODES,
    CONNECTION_CODES,
    fix_authentication,
)
from connectors.kafka._client._clients import Cluster
from connectors.kafka._errors import KafkaCode, KafkaConnectorError

# Seconds the first contact may take before the cluster is reported unreachable: a wrong
# address never answers, a restarting broker accepts connections again within seconds.
CONNECT_WAIT_S = 10.0
# Seconds of one metadata request while waiting (connection errors are read in between).
CONNECT_STEP_S = 1.0
# Connection errors kept per client (the client outlives the check: bounded memory).
_KEPT_ERRORS = 16


def connect_admin(cluster: Cluster) -> AdminClient:
    """Return an AdminClient on ``cluster`` whose brokers answered (steps in the module doc).

    Errors name the options of ``cluster`` (``address_option``, ``config_option``).

    Raises:
        KafkaCode.AUTHENTICATION: authentication failed (SASL or TLS).
        KafkaCode.CONNECT: no broker answered within ``CONNECT_WAIT_S``.

    """
    seen: collections.deque[KafkaError] = collections.deque(maxlen=_KEPT_ERRORS)
    client = _clients.admin(cluster, {"error_cb": seen.append})
    address, setting = cluster.bootstrap_servers, cluster.address_option
    deadline = time.monotonic() + CONNECT_WAIT_S
    while True:
        try:
            client.list_topics(timeout=CONNECT_STEP_S)
        except KafkaException as exc:
            last: KafkaException = exc
        else:
            return client
        client.poll(0)  # serves error_cb (and librdkafka's log lines)
        auth = next((e for e in seen if e.code() in AUTHENTICATION_CODES), None)
        if auth is not None:
            msg = (
                f"authentication failed: Kafka at {address} refused the client "
                f"({auth.name()}: {_secrets.scrub(auth.str())}, security.protocol="
                f"{cluster.security_protocol}); {fix_authentication(cluster.config_option)}"
            )
            raise KafkaConnectorError(
                msg,
                address=address,
                setting=cluster.config_option,
                kafka_code=auth.code(),
                code=KafkaCode.AUTHENTICATION,
            )
        if time.monotonic() >= deadline:
            raise KafkaConnectorError(
                _unreachable(cluster, seen, last),
                address=address,
                setting=setting,
                code=KafkaCode.CONNECT,
            )


def _unreachable(
    cluster: Cluster, seen: collections.deque[KafkaError], last: KafkaException
) -> str:
    all_down = KafkaError._ALL_BROKERS_DOWN  # noqa: SLF001 - librdkafka's local code
    conn = [e for e in seen if e.code() in CONNECTION_CODES and e.code() != all_down]
    why = (
        f"last connection error: {conn[-1].str()}"
        if conn
        else f"no broker answered within {CONNECT_WAIT_S:.0f}s ({last.args[0] if last.args else last})"
    )
    protocol = cluster.security_protocol
    return (
        f"cannot connect to Kafka at {cluster.bootstrap_servers} ({_secrets.scrub(why)}); "
        f"check {cluster.address_option} (host:port of reachable brokers) and that the "
        f"brokers run, and that this listener speaks security.protocol={protocol} (set in "
        f"{cluster.config_option}; a TLS or SASL listener needs its settings there)"
    )
