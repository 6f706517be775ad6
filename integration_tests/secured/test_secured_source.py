"""The ``kafka-rc`` source on a SASL_SSL listener: batch and streaming reads.

The source gets the listener's settings as its ``kafka.*`` options, built by
:func:`connectors.kafka.kafka_options` from the same ``client_config`` a sink takes; its
driver-side admin client and its tasks' consumers all need them (the listener refuses any
client without). The input holds committed and aborted transactions and plain records:
every read returns the committed and plain ones, each once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import kafka_options
from integration_tests.e2e._scenario import wait_until
from integration_tests.kafka_source._support import TxnWriter, offsets, produce_plain, values
from integration_tests.kafka_source.test_stream import Collector, run_available_now
from integration_tests.support.secure_kafka import SecureKafka

pytestmark = [pytest.mark.spark, pytest.mark.secured]

# Offsets per micro-batch: the input spans several.
MAX_OFFSETS_PER_TRIGGER = 16
# Seconds for the transaction markers of the last commit or abort to be written.
SETTLE_S = 60.0


def write_input(secure: SecureKafka, topic: str, round_: int) -> list[str]:
    """Commit and abort transactions on partition 0, produce plain records on 1."""
    writer = TxnWriter(secure.bootstrap, topic, secure.settings)
    expected: list[str] = []
    for i in range(3):
        committed = [f"r{round_}-c{i}-{j}" for j in range(4)]
        writer.commit(committed)
        writer.abort([f"r{round_}-x{i}-{j}" for j in range(3)])
        plain = [f"r{round_}-p{i}-{j}" for j in range(2)]
        produce_plain(secure.bootstrap, topic, plain, partition=1, settings=secure.settings)
        expected += committed + plain
    return expected


def settled(admin: Any, topic: str) -> None:
    """Wait until partition 0's last stable offset reaches its high watermark."""

    def stable() -> bool:
        _, lso, hw = offsets(admin, topic)
        return lso == hw

    assert wait_until(stable, SETTLE_S), f"{topic}[0] keeps a transaction open"


def test_batch_and_streaming_reads_see_committed_records_once(
    rc_spark: Any,
    secure_kafka: SecureKafka,
    secure_admin: Any,
    secure_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = secure_topic("sec-src", partitions=2)
    first = write_input(secure_kafka, topic, 0)
    settled(secure_admin, topic)
    options = kafka_options(secure_kafka.bootstrap, secure_kafka.settings)
    assert options["kafka.security.protocol"] == secure_kafka.protocol

    batch = rc_spark.read.format("kafka-rc").options(**options).option("subscribe", topic).load()
    assert sorted(values(batch.collect())) == sorted(first)

    def stream() -> Any:
        return (
            rc_spark.readStream.format("kafka-rc")
            .options(**options)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
            .load()
        )

    checkpoint = tmp_path / "checkpoint"
    before = Collector()
    run_available_now(stream(), before, checkpoint)
    assert sorted(before.values()) == sorted(first)
    assert len(before.batches) > 1, before.batches  # the rate limit cut the input
    # More input; the query restarted from its checkpoint reads only the new records.
    second = write_input(secure_kafka, topic, 1)
    settled(secure_admin, topic)
    after = Collector()
    run_available_now(stream(), after, checkpoint)
    assert sorted(after.values()) == sorted(second)
