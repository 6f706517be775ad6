"""``commit_offsets_to_group``: the consumer group shows exactly the committed input.

kafka-rc -> exactly-once KafkaSink (aligned) with a consumer group for the input offsets.
After each run the group's committed offsets, read as lag tools read them (the admin
client's ListConsumerGroupOffsets, and a read_committed consumer's ``committed()``), equal
the ``end`` of the last committed epoch's input: after an aborted epoch they stay at the
epoch before (never ahead of the output), after the replay they reach the topic's end (not
one batch behind).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from connectors.kafka import KafkaEpochLog, KafkaSink, read_markers
from connectors.testing import FaultPlan, inject_faults
from connectors.verify import check_exactly_once, produce_input
from txn import EpochState

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

# Seconds one availableNow run may take on a busy machine (a few epochs).
RUN_TIMEOUT_S = 300.0
# Seconds an admin or consumer call may take.
CALL_TIMEOUT_S = 30.0
RECORDS = 120
PER_TRIGGER = 60


def _run(spark: Any, bootstrap: str, topic: str, sink: KafkaSink, ck: Path) -> Any:
    query = (
        spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_TRIGGER))
        .load()
        .selectExpr("key", "value")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(Exception):  # a failed query raises here; its exception is checked
        query.awaitTermination(RUN_TIMEOUT_S)
    return query


def _admin_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request)[group].result(timeout=CALL_TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def _consumer_offsets(bootstrap: str, group: str, topic: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    try:
        wanted = [TopicPartition(topic, p) for p in range(2)]
        found = consumer.committed(wanted, timeout=CALL_TIMEOUT_S)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found}


def _last_committed_end(bootstrap: str, sink_id: str) -> dict[tuple[str, int], int]:
    log = KafkaEpochLog(bootstrap, sink_id, create_topic=False)
    try:
        history = log.load()
    finally:
        log.close()
    plan = history.last_committed_plan()
    assert plan is not None and plan.input is not None
    return plan.input.end_map()


def test_the_group_shows_the_committed_input_after_an_abort_and_after_the_replay(
    rc_spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    tmp_path: Path,
    closing: Callable[[KafkaSink], KafkaSink],
) -> None:
    inp = new_topic("offsets-group-in", partitions=2)
    out = new_topic("offsets-group-out", partitions=2)
    produce_input(kafka_bootstrap, inp, RECORDS, keys=8)
    sink_id = f"offsets-group-{uuid.uuid4().hex[:8]}"
    group = f"lag-{sink_id}"
    faults = tmp_path / "faults.json"  # partition 1 fails epoch 1 after partition 0 wrote it
    faults.write_text(
        json.dumps(
            [{"id": "f", "step": "after_write", "action": "raise", "epoch": 1, "partition": 1}]
        )
    )
    options: dict[str, Any] = {
        "parallelism": 2,
        "mode": "aligned",
        "commit_offsets_to_group": group,
        "stage_retries": 0,
    }
    first = closing(KafkaSink(kafka_bootstrap, out, sink_id, **options))
    with inject_faults(FaultPlan(str(faults))) as plan:
        query = _run(rc_spark, kafka_bootstrap, inp, first, tmp_path / "ck")
    assert query.exception() is not None and plan.has_fired("f"), "epoch 1 never failed"
    first.close()
    log = KafkaEpochLog(kafka_bootstrap, sink_id, create_topic=False)
    try:
        history = log.load()
    finally:
        log.close()
    assert history.state(1) is not EpochState.COMMITTED  # failed: in doubt or aborted
    markers = read_markers(kafka_bootstrap, sink_id, 2)
    assert [m.epoch if m else None for m in markers.values()] == [0, 0]
    epoch0 = _last_committed_end(kafka_bootstrap, sink_id)
    assert sum(epoch0.values()) == PER_TRIGGER
    # Never ahead: epoch 1's offsets were in partition 0's aborted transaction.
    assert _admin_offsets(kafka_bootstrap, group) == epoch0
    assert _consumer_offsets(kafka_bootstrap, group, inp) == epoch0

    second = closing(KafkaSink(kafka_bootstrap, out, sink_id, **options))
    query = _run(rc_spark, kafka_bootstrap, inp, second, tmp_path / "ck")
    assert query.exception() is None, query.exception()
    second.close()  # writes the last epoch's deferred completion (docs/architecture.md)
    end = _last_committed_end(kafka_bootstrap, sink_id)
    assert sum(end.values()) == RECORDS
    # Not one batch behind: the last epoch's offsets are committed with its output.
    assert _admin_offsets(kafka_bootstrap, group) == end
    assert _consumer_offsets(kafka_bootstrap, group, inp) == end
    report = check_exactly_once(kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    assert report.ok and report.committed_records == RECORDS
