"""``client_config`` reaches the first client of every entry point of the kit, on a real broker.

The suite's broker listens in plaintext, so SASL settings make every client that gets them
fail authentication (minikafka and Apache Kafka alike answer a SaslHandshake on a
PLAINTEXT listener with an error, which librdkafka reports as ``_AUTHENTICATION``): an
entry point that dropped ``client_config`` would connect in plaintext and succeed, and
this test fails. Each failure must be the typed
:class:`connectors.kafka.KafkaCode.AUTHENTICATION` (not "unreachable"), within seconds,
naming the settings to fix and never the password, with nothing written.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaEpochLog, KafkaSink, read_markers
from connectors.kafka._client import CONNECT_WAIT_S
from connectors.ops import main as eos
from connectors.verify import (
    check_exactly_once,
    end_offsets,
    produce_input,
    read_topic,
    scan_topic,
)

# Seconds beyond CONNECT_WAIT_S a failure may take on a busy machine.
SLACK_S = 10.0
SENTINEL = f"SENTINEL-{uuid.uuid4().hex}"
REFUSED = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "app",
    "sasl.password": SENTINEL,
}


def refused_in_seconds(call: Callable[[], Any]) -> KafkaConnectorError:
    started = time.monotonic()
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is KafkaCode.AUTHENTICATION
    ) as info:
        call()
    assert time.monotonic() - started < CONNECT_WAIT_S + SLACK_S
    text = str(info.value)
    assert "authentication failed" in text and "sasl.password" in text
    assert SENTINEL not in text
    return info.value


def test_every_entry_point_of_the_sink_side_fails_typed_and_fast(
    kafka_bootstrap: str, new_topic: Callable[..., str], kafka_admin: Any
) -> None:
    topic = new_topic("cc-out", 1)
    sink_id, log_topic = f"cc-{uuid.uuid4().hex[:8]}", f"cc-log-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        sink_id,
        client_config=REFUSED,
        epoch_log_topic=log_topic,
        create_topics=True,
    )
    error = refused_in_seconds(sink.preflight)
    assert error.setting == "client_config" and error.address == kafka_bootstrap
    log = KafkaEpochLog(kafka_bootstrap, sink_id, topic=log_topic, client_config=REFUSED)
    refused_in_seconds(log.load)
    refused_in_seconds(lambda: read_markers(kafka_bootstrap, sink_id, 2, client_config=REFUSED))
    # Nothing was written: no epoch-log topic, no record in the output.
    assert end_offsets(kafka_bootstrap, topic, "read_uncommitted") == {0: 0}
    assert log_topic not in kafka_admin.list_topics(timeout=30).topics


def test_every_entry_point_of_the_checker_fails_typed_and_fast(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cc-chk", 1)
    refused_in_seconds(
        lambda: end_offsets(kafka_bootstrap, topic, "read_committed", client_config=REFUSED)
    )
    refused_in_seconds(lambda: read_topic(kafka_bootstrap, topic, client_config=REFUSED))
    refused_in_seconds(lambda: scan_topic(kafka_bootstrap, topic, client_config=REFUSED))
    refused_in_seconds(lambda: produce_input(kafka_bootstrap, topic, 5, client_config=REFUSED))
    refused_in_seconds(
        lambda: check_exactly_once(
            kafka_bootstrap,
            input_topic=topic,
            output_topic=topic,
            sink_id="cc",
            client_config=REFUSED,
        )
    )
    assert end_offsets(kafka_bootstrap, topic, "read_uncommitted") == {0: 0}  # nothing produced


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "s1"],
        ["abort-lingering", "s1", "--parallelism", "1"],
        ["reset", "s1"],
        ["preflight", "--topic", "t"],
        ["verify", "--input-topic", "i", "--output-topic", "o"],
    ],
    ids=lambda argv: argv[0],
)
def test_every_eos_subcommand_fails_typed_and_fast(
    kafka_bootstrap: str, argv: list[str], tmp_path: Any, capsys: Any
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in REFUSED.items()))
    started = time.monotonic()
    code = eos(
        ["--bootstrap-servers", kafka_bootstrap, "--json", "--command-config", str(path), *argv]
    )
    assert time.monotonic() - started < CONNECT_WAIT_S + SLACK_S
    out = capsys.readouterr().out
    assert code == 2 and "[authentication]" in out and "authentication failed" in out
    assert "--command-config" in out and SENTINEL not in out


@pytest.mark.spark
def test_a_sink_call_with_refused_credentials_fails_typed_before_any_epoch(
    spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    kafka_admin: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # transaction_timeout_ms=1000: the sink warns about epochs slower than 0.5 s; an epoch
    # that never started must not be warned about.
    topic, log_topic = new_topic("cc-call", 1), f"cc-log-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        f"cc-{uuid.uuid4().hex[:8]}",
        client_config=REFUSED,
        epoch_log_topic=log_topic,
        transaction_timeout_ms=1000,
    )
    df = spark.createDataFrame([("k", "v")], "key STRING, value STRING")
    try:
        with caplog.at_level(logging.WARNING, logger="connectors"):
            refused_in_seconds(lambda: sink(df, 0))
        assert not [r for r in caplog.records if "took" in r.getMessage()], caplog.text
        assert sink.metrics()[-1].epoch == -1
        assert "authentication failed" in (sink.metrics()[-1].error or "")
    finally:
        sink.close()
    assert end_offsets(kafka_bootstrap, topic, "read_uncommitted") == {0: 0}
    assert log_topic not in kafka_admin.list_topics(timeout=30).topics
