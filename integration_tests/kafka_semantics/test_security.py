"""Secured listeners (SASL PLAIN / SCRAM, TLS): configured clients work, all others are refused.

Each test takes a listener of one kind from the ``secure_listeners`` fixture: the listeners
``KAFKA_SECURE_CONFIG`` describes (a real cluster; a kind it does not describe is skipped),
else a secured minikafka. The tests see only a bootstrap address and librdkafka settings.

What Kafka does and these tests pin:

1. with the right settings, admin requests, transactions and read_committed consumer groups
   work as on a PLAINTEXT listener (a subscribed group commits its offsets);
2. a wrong password or an unknown user is answered SASL_AUTHENTICATION_FAILED, which
   librdkafka reports as ``_AUTHENTICATION`` within seconds (not a timeout);
3. a client without SASL settings, or without TLS on a TLS listener, gets no metadata;
4. on the wire: before authentication, ApiVersions is answered and any other request
   closes the connection; an unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM
   with the enabled ones, and the connection closes.
"""

from __future__ import annotations

import ssl
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from integration_tests.support.secure_kafka import (
    CREDENTIAL_KEYS,
    SECURE_CONFIG_ENV,
    SecureKafka,
    SecureListeners,
)

from ._support import (
    CLIENT_TIMEOUT_S,
    commit_values,
    group_consumer,
    produce_values,
    read_partition,
    txn_producer,
    unique,
    values,
    wait_stable,
)
from ._wire import WireClient, WireError

# Seconds within which a client with wrong credentials must report _AUTHENTICATION: the
# broker answers the first attempt at once; generous for a busy machine.
AUTH_ERROR_DEADLINE_S = 15.0
# Seconds a refused client gets to fetch metadata (it must fail, so this bounds the wait).
REFUSED_METADATA_TIMEOUT_S = 5.0
# Kafka protocol error codes the wire tests compare with.
UNSUPPORTED_SASL_MECHANISM = 33

SASL_KINDS = [
    pytest.param(("SASL_PLAINTEXT", "PLAIN"), id="sasl_plaintext-plain"),
    pytest.param(("SASL_PLAINTEXT", "SCRAM-SHA-256"), id="sasl_plaintext-scram-sha-256"),
    pytest.param(("SASL_PLAINTEXT", "SCRAM-SHA-512"), id="sasl_plaintext-scram-sha-512"),
    pytest.param(("SASL_SSL", "SCRAM-SHA-512"), id="sasl_ssl-scram-sha-512"),
]
TLS_KINDS = [
    pytest.param(("SSL", None), id="ssl"),
    pytest.param(("SASL_SSL", "SCRAM-SHA-512"), id="sasl_ssl-scram-sha-512"),
]
ALL_KINDS = [*SASL_KINDS[:3], *TLS_KINDS]


@pytest.fixture
def listener(request: pytest.FixtureRequest, secure_listeners: SecureListeners) -> SecureKafka:
    """The listener of the kind (protocol, mechanism) the test is parametrized with."""
    protocol, mechanism = request.param
    found = secure_listeners.get(protocol, mechanism)
    if found is None:
        pytest.skip(f"{SECURE_CONFIG_ENV} describes no {protocol} listener with {mechanism}")
    return found


@pytest.fixture
def secure_topic(listener: SecureKafka) -> Iterator[str]:
    """A new one-partition topic on the listener, created over it (and deleted after)."""
    admin = AdminClient(listener.client_config())
    name = f"secure-{uuid.uuid4().hex[:10]}"
    futures = admin.create_topics([NewTopic(name, 1, -1)], request_timeout=CLIENT_TIMEOUT_S)
    futures[name].result(timeout=CLIENT_TIMEOUT_S)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while name not in admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics:
        assert time.monotonic() < deadline, f"topic {name} never showed in the metadata"
        time.sleep(0.1)
    yield name
    admin.delete_topics([name], request_timeout=CLIENT_TIMEOUT_S)


def _metadata_refused(config: dict[str, str]) -> KafkaError:
    """Ask for metadata with ``config``; return the error (fail the test if it is answered)."""
    admin = AdminClient(config)
    with pytest.raises(KafkaException) as refused:
        admin.list_topics(timeout=REFUSED_METADATA_TIMEOUT_S)
    error = refused.value.args[0]
    assert isinstance(error, KafkaError)
    return error


def _downgraded(listener: SecureKafka, protocol: str, *, drop: tuple[str, ...]) -> dict[str, str]:
    config = listener.client_config(**{"security.protocol": protocol})
    return {k: v for k, v in config.items() if k not in drop}


@pytest.mark.parametrize("listener", ALL_KINDS, indirect=True)
def test_transactions_and_groups_work_when_configured(
    listener: SecureKafka, secure_topic: str
) -> None:
    settings = listener.settings
    producer = txn_producer(listener.bootstrap, unique("secure"), **settings)
    commit_values(producer, secure_topic, ["a", "b"])
    producer.begin_transaction()
    produce_values(producer, secure_topic, ["aborted"])
    producer.abort_transaction(CLIENT_TIMEOUT_S)
    commit_values(producer, secure_topic, ["c"])
    admin = AdminClient(listener.client_config())
    wait_stable(admin, secure_topic)  # type: ignore[arg-type]

    committed = read_partition(listener.bootstrap, secure_topic, committed=True, **settings)
    everything = read_partition(listener.bootstrap, secure_topic, committed=False, **settings)

    assert values(committed) == ["a", "b", "c"]
    assert values(everything) == ["a", "b", "aborted", "c"]
    # a, b, commit marker, aborted, abort marker, c (offset 5): the group commits 6
    assert _consume_in_a_group(listener, secure_topic) == (["a", "b", "c"], 6)


def _consume_in_a_group(listener: SecureKafka, topic: str) -> tuple[list[str], int]:
    """Subscribe in a new group, read 3 records, commit; return them and the committed offset."""
    group = unique("secure-group")
    settings = {**listener.settings, "auto.offset.reset": "earliest"}
    consumer = group_consumer(listener.bootstrap, group, committed=True, **settings)
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(seen) < 3:
            assert time.monotonic() < deadline, f"group {group} read only {seen}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            seen.append(msg.value().decode())
        consumer.commit(asynchronous=False)
        (position,) = consumer.committed([TopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    return seen, position.offset


@pytest.mark.parametrize("listener", SASL_KINDS, indirect=True)
@pytest.mark.parametrize("wrong", ["password", "user"])
def test_wrong_credentials_are_an_authentication_error(listener: SecureKafka, wrong: str) -> None:
    key = "sasl.password" if wrong == "password" else "sasl.username"
    config = listener.client_config(**{key: f"wrong-{uuid.uuid4().hex[:8]}"})
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    started = time.monotonic()
    producer.produce("never-written", b"x")
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() - started < AUTH_ERROR_DEADLINE_S, (
            f"no _AUTHENTICATION error within {AUTH_ERROR_DEADLINE_S}s, got {errors}"
        )
        producer.poll(0.2)
    assert producer.flush(0) == 1  # the record was never delivered
    producer.purge()  # drop it, so the producer closes without a warning
    producer.flush(0)
    _metadata_refused(config)


@pytest.mark.parametrize("listener", SASL_KINDS, indirect=True)
def test_a_client_without_sasl_settings_gets_no_metadata(listener: SecureKafka) -> None:
    without_sasl = listener.protocol.removeprefix(
        "SASL_"
    )  # SASL_SSL -> SSL, SASL_PLAINTEXT -> PLAINTEXT
    _metadata_refused(_downgraded(listener, without_sasl, drop=CREDENTIAL_KEYS))


@pytest.mark.parametrize("listener", TLS_KINDS, indirect=True)
def test_plain_tcp_is_refused_by_a_tls_listener(listener: SecureKafka) -> None:
    without_tls = {"SSL": "PLAINTEXT", "SASL_SSL": "SASL_PLAINTEXT"}[listener.protocol]
    _metadata_refused(_downgraded(listener, without_tls, drop=("ssl.ca.location",)))


def _wire_client(listener: SecureKafka) -> WireClient:
    host, _, port = listener.bootstrap.split(",")[0].rpartition(":")
    tls = None
    if listener.protocol == "SASL_SSL":
        tls = ssl.create_default_context(cafile=listener.settings.get("ssl.ca.location"))
    return WireClient(host.strip("[]"), int(port), tls)


@pytest.mark.parametrize("listener", [SASL_KINDS[0], SASL_KINDS[3]], indirect=True)
def test_before_authentication_only_api_versions_is_answered(listener: SecureKafka) -> None:
    with _wire_client(listener) as client:
        versions = client.api_versions()
        assert 17 in versions and 36 in versions  # SaslHandshake, SaslAuthenticate
        with pytest.raises((WireError, OSError)):
            client.metadata_broker_count()


@pytest.mark.parametrize("listener", [SASL_KINDS[0], SASL_KINDS[3]], indirect=True)
def test_an_unknown_mechanism_is_refused_with_the_enabled_ones(listener: SecureKafka) -> None:
    with _wire_client(listener) as client:
        error, enabled = client.sasl_handshake("NO-SUCH-MECHANISM")
        assert error == UNSUPPORTED_SASL_MECHANISM
        assert listener.mechanism in enabled
        with pytest.raises((WireError, OSError)):
            client.api_versions()
