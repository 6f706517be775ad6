"""First contact with a cluster: a wrong address or refused credentials fail fast and typed.

Real clients over TCP: a port nobody listens on (connection refused), a host name that
cannot resolve (``.invalid`` is reserved, RFC 2606), and SASL towards the suite's broker,
whose listener has no SASL (refused authentication, on minikafka and on a PLAINTEXT
listener of Apache Kafka alike).
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaSink, register
from connectors.kafka._client import CONNECT_WAIT_S, _connect
from connectors.kafka._source._cluster import ClusterView
from connectors.kafka._source._options import SourceOptions

# Seconds beyond CONNECT_WAIT_S a failure may take on a busy machine (client start-up,
# the last metadata request's own timeout).
SLACK_S = 10.0
# Seconds of the first-contact wait where it runs in the test's own process (the sink's
# preflight, the source's ClusterView): an address that never answers ends in the same
# typed error, with the connection errors seen, after any deadline; 3 s test what 10 s would.
SHORT_CONNECT_WAIT_S = 3.0


@pytest.fixture
def connect_wait(monkeypatch: pytest.MonkeyPatch) -> float:
    """The first-contact wait of this process, shortened to ``SHORT_CONNECT_WAIT_S``."""
    monkeypatch.setattr(_connect, "CONNECT_WAIT_S", SHORT_CONNECT_WAIT_S)
    return SHORT_CONNECT_WAIT_S


def refused_address() -> str:
    """``127.0.0.1:port`` of a port that was free a moment ago (nothing listens on it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


UNRESOLVABLE = "no-such-broker.invalid:9092"


@pytest.mark.parametrize(
    "address", [refused_address(), UNRESOLVABLE], ids=["refused", "unresolvable"]
)
def test_sink_preflight_names_the_address_and_the_option(
    address: str, closing: Callable[[KafkaSink], KafkaSink], connect_wait: float
) -> None:
    # The source gets the same check (test below); each address kind once per side.
    sink = closing(KafkaSink(address, "out", f"conn-{uuid.uuid4().hex[:8]}"))
    started = time.monotonic()
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.CONNECT) as info:
        sink.preflight()
    took = time.monotonic() - started
    assert took < connect_wait + SLACK_S
    message = str(info.value)
    assert address in message and "bootstrap_servers" in message
    assert info.value.address == address and info.value.setting == "bootstrap_servers"
    assert ("Connection refused" in message) if address != UNRESOLVABLE else ("resolve" in message)


def test_source_names_the_address_and_the_option(connect_wait: float) -> None:
    address = UNRESOLVABLE
    view = ClusterView(
        SourceOptions.from_options({"kafka.bootstrap.servers": address, "subscribe": "t"})
    )
    started = time.monotonic()
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.CONNECT) as info:
        view.discover()
    assert time.monotonic() - started < connect_wait + SLACK_S
    assert address in str(info.value) and "kafka.bootstrap.servers" in str(info.value)


def test_source_refused_authentication_is_typed_at_once(kafka_bootstrap: str) -> None:
    view = ClusterView(
        SourceOptions.from_options(
            {
                "kafka.bootstrap.servers": kafka_bootstrap,
                "subscribe": "t",
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.username": "user",
                "kafka.sasl.password": "not-logged",
            }
        )
    )
    started = time.monotonic()
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is KafkaCode.AUTHENTICATION
    ) as info:
        view.discover()
    assert time.monotonic() - started < CONNECT_WAIT_S + SLACK_S
    assert kafka_bootstrap in str(info.value) and "not-logged" not in str(info.value)


@pytest.mark.usefixtures("rc_spark")  # the kafka-rc source: PySpark 4.2+
@pytest.mark.spark
def test_streaming_source_on_a_wrong_address_fails_with_the_typed_error(spark: Any) -> None:
    register(spark)
    address = refused_address()
    df = (
        spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", address)
        .option("subscribe", "t")
        .load()
    )
    query = df.writeStream.format("noop").start()
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # Spark wraps the Python error
        query.awaitTermination(120)
    assert time.monotonic() - started < CONNECT_WAIT_S + 2 * SLACK_S
    assert "[connect]" in str(info.value) and address in str(info.value)
    assert "kafka.bootstrap.servers" in str(info.value)


@pytest.mark.spark
def test_no_epoch_duration_warning_before_an_epoch_exists(
    spark: Any,
    caplog: pytest.LogCaptureFixture,
    closing: Callable[[KafkaSink], KafkaSink],
    connect_wait: float,
) -> None:
    # transaction_timeout_ms=1000: the sink warns about epochs slower than 0.5 s, and the
    # failed preflight alone takes longer than that.
    sink = closing(
        KafkaSink(
            refused_address(), "out", f"conn-{uuid.uuid4().hex[:8]}", transaction_timeout_ms=1000
        )
    )
    df = spark.createDataFrame([("k", "v")], "key STRING, value STRING")
    with (
        caplog.at_level(logging.WARNING, logger="connectors"),
        pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.CONNECT),
    ):
        sink(df, 0)
    assert not [r for r in caplog.records if "took" in r.getMessage()], caplog.text
    assert sink.metrics()[-1].epoch == -1  # the failed call is still recorded
