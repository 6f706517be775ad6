"""kafka-rc source -> exactly-once KafkaSink, verified by the end-to-end checker."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from connectors.kafka import KafkaSink
from connectors.verify import (
    check_exactly_once,
    make_input_value,
    print_report,
    produce_input,
)

from ._support import CLIENT_TIMEOUT_S

pytestmark = pytest.mark.spark

# Seconds the availableNow pipeline may take on a busy machine (several epochs).
PIPELINE_TIMEOUT_S = 400.0


def abort_junk(bootstrap: str, topic: str, first_id: int, n: int) -> None:
    """Write well-formed input records in a transaction and abort it."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"junk-{uuid.uuid4().hex[:10]}"}
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(n):
        key = f"k{i % 4}"
        producer.produce(topic, make_input_value(first_id + i, key, 10_000 + i), key=key.encode())
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    producer.abort_transaction(CLIENT_TIMEOUT_S)


@pytest.mark.compat
@pytest.mark.timeout(600)
def test_source_to_exactly_once_sink_passes_the_checker(
    rc_spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    tmp_path: Path,
    closing: Callable[[KafkaSink], KafkaSink],
) -> None:
    inp = new_topic("rc-pipe-in", partitions=2)
    out = new_topic("rc-pipe-out", partitions=3)
    produce_input(kafka_bootstrap, inp, 150, keys=8)
    abort_junk(kafka_bootstrap, inp, 1_000_000, 40)  # must never reach the output
    produce_input(kafka_bootstrap, inp, 150, keys=8, start=150)
    sink_id = f"rc-pipe-{uuid.uuid4().hex[:8]}"
    sink = closing(
        KafkaSink(
            kafka_bootstrap, out, sink_id, parallelism=2, order_by=("in_partition", "in_offset")
        )
    )
    df = (
        rc_spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", inp)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "120")
        .load()
        .selectExpr("key", "value", "partition AS in_partition", "offset AS in_offset")
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(PIPELINE_TIMEOUT_S), "pipeline did not finish"
    assert query.exception() is None
    assert query.lastProgress is not None and int(query.lastProgress["batchId"]) >= 2

    report = check_exactly_once(kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    print_report(report)
    assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
    assert report.epoch_log_checked
    assert report.committed_records == report.input_records == 300
