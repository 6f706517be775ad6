"""Wrong or missing credentials on a SASL_SSL listener: typed at once, nothing written.

The broker answers a wrong password or an unknown user with SASL_AUTHENTICATION_FAILED:
the sink's first call and the source's first lookup must stop within seconds with
:class:`connectors.kafka.KafkaCode.AUTHENTICATION` naming the settings to fix and where
they are set (``client_config``, the source's ``kafka.*`` options), never the password;
the sink must write nothing (no epoch log topic, no record) and warn about no epoch that
never started. SASL settings without a password are refused where the sink is built,
naming the settings; a client with no security settings at all gets no answer from the
listener, so the sink's first contact fails naming ``security.protocol`` and the option.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaSink, kafka_options
from connectors.kafka._client import CONNECT_WAIT_S
from connectors.verify import end_offsets
from integration_tests.support.secure_kafka import SecureKafka

pytestmark = pytest.mark.secured

# Seconds beyond CONNECT_WAIT_S a failure may take on a busy machine (client start-up,
# the TLS handshake, the last metadata request's own timeout).
SLACK_S = 10.0
SENTINEL = f"SENTINEL-{uuid.uuid4().hex}"


@pytest.fixture
def sasl(secure_kafka: SecureKafka) -> SecureKafka:
    if secure_kafka.mechanism is None:
        pytest.skip(f"the listener ({secure_kafka.protocol}) takes no SASL credentials")
    return secure_kafka


def refused(secure: SecureKafka, **overrides: str) -> dict[str, str]:
    """The listener's settings with ``overrides`` (a wrong user or password)."""
    return {**secure.settings, **overrides}


def wrong_credentials() -> list[Any]:
    return [
        pytest.param({"sasl.password": SENTINEL}, id="wrong-password"),
        pytest.param({"sasl.username": f"nobody-{uuid.uuid4().hex[:6]}"}, id="unknown-user"),
    ]


@pytest.mark.spark
@pytest.mark.parametrize("wrong", wrong_credentials())
def test_a_sink_call_with_refused_credentials_fails_typed_and_writes_nothing(
    spark: Any,
    sasl: SecureKafka,
    wrong: dict[str, str],
    secure_topic: Callable[..., str],
    secure_admin: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, log_topic = secure_topic("sec-refused"), f"sec-log-{uuid.uuid4().hex[:8]}"
    # transaction_timeout_ms=1000: the sink warns about epochs slower than half of it; an
    # epoch that never started must not be warned about.
    sink = KafkaSink(
        sasl.bootstrap,
        topic,
        f"sec-{uuid.uuid4().hex[:8]}",
        client_config=refused(sasl, **wrong),
        epoch_log_topic=log_topic,
        transaction_timeout_ms=1000,
    )
    df = spark.createDataFrame([("k", "v")], "key STRING, value STRING")
    started = time.monotonic()
    try:
        with (
            caplog.at_level(logging.WARNING, logger="connectors"),
            pytest.raises(
                KafkaConnectorError, check=lambda e: e.code is KafkaCode.AUTHENTICATION
            ) as info,
        ):
            sink(df, 0)
        assert time.monotonic() - started < CONNECT_WAIT_S + SLACK_S
        assert not [r for r in caplog.records if "took" in r.getMessage()], caplog.text
        assert sink.metrics()[-1].epoch == -1
    finally:
        sink.close()
    text = str(info.value)
    assert "authentication failed" in text and "sasl.password" in text, text
    assert info.value.setting == "client_config" and sasl.bootstrap in text
    assert SENTINEL not in text + caplog.text
    assert end_offsets(sasl.bootstrap, topic, "read_uncommitted", client_config=sasl.settings) == {
        0: 0
    }
    assert log_topic not in secure_admin.list_topics(timeout=30).topics


def test_sasl_settings_without_a_password_are_refused_where_the_sink_is_built(
    sasl: SecureKafka,
) -> None:
    missing = {k: v for k, v in sasl.settings.items() if k != "sasl.password"}
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is KafkaCode.CLIENT_CONFIG
    ) as info:
        KafkaSink(sasl.bootstrap, "t", "sec-missing", client_config=missing)
    assert "sasl.password" in str(info.value) and "client_config" in str(info.value)


def test_a_client_without_security_settings_is_told_which_setting_to_check(
    secure_kafka: SecureKafka,
) -> None:
    sink = KafkaSink(secure_kafka.bootstrap, "t", f"sec-{uuid.uuid4().hex[:8]}")
    started = time.monotonic()
    try:
        with pytest.raises(
            KafkaConnectorError,
            check=lambda e: e.code in (KafkaCode.CONNECT, KafkaCode.AUTHENTICATION),
        ) as info:
            sink.preflight()
    finally:
        sink.close()
    assert time.monotonic() - started < CONNECT_WAIT_S + SLACK_S
    text = str(info.value)
    assert "security.protocol=PLAINTEXT" in text and "client_config" in text, text


@pytest.mark.spark
def test_the_source_with_refused_credentials_fails_typed_before_any_batch(
    spark: Any, sasl: SecureKafka, secure_topic: Callable[..., str]
) -> None:
    from connectors.kafka import register

    topic = secure_topic("sec-src-refused")
    options = kafka_options(sasl.bootstrap, refused(sasl, **{"sasl.password": SENTINEL}))
    reader = spark.readStream.format(register(spark)).options(**options)
    batches: list[int] = []
    query = (
        reader.option("subscribe", topic)
        .load()
        .writeStream.foreachBatch(lambda _df, batch_id: batches.append(batch_id))
        .start()
    )
    started = time.monotonic()
    with pytest.raises(Exception) as info:  # Spark wraps the Python error
        query.awaitTermination(120)
    assert time.monotonic() - started < CONNECT_WAIT_S + 2 * SLACK_S
    text = str(info.value)
    assert "[authentication]" in text and "authentication failed" in text, text
    assert "'kafka.*' options" in text and SENTINEL not in text
    assert batches == []
    with pytest.raises(Exception) as batch_info:  # a batch read is refused alike
        spark.read.format("kafka-rc").options(**options).option("subscribe", topic).load().count()
    assert "[authentication]" in str(batch_info.value)
    assert SENTINEL not in str(batch_info.value)
