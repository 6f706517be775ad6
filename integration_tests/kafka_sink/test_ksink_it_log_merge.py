"""``KafkaEpochLog.append_all``: several records in one Kafka transaction, all or none.

What the deferred completion relies on (docs/architecture.md, section 2): the completion
of epoch N and the plan of N+1 are one durable write. Real confluent-kafka clients on the
suite's broker.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.kafka import DEFAULT_EPOCH_LOG_TOPIC, KafkaEpochLog
from txn import EpochCompletion, EpochPlan, TxnCode, TxnError

# Seconds to read the log topic back.
READ_TIMEOUT_S = 30.0


def _offsets_of(bootstrap: str, sink_id: str) -> list[tuple[int, str]]:
    """(offset, key) of every record of ``sink_id`` in the log topic, committed or not."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"merge-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": "false",
            "enable.partition.eof": "true",
            "isolation.level": "read_uncommitted",
        }
    )
    out: list[tuple[int, str]] = []
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        consumer.assign([TopicPartition(DEFAULT_EPOCH_LOG_TOPIC, 0, 0)])
        while time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                break  # the end of the partition
            key = (m.key() or b"").decode()
            if key.startswith(f"{sink_id}/"):
                out.append((m.offset() or 0, key))
    finally:
        consumer.close()
    return out


def test_records_appended_together_are_one_transaction(kafka_bootstrap: str) -> None:
    sink_id = f"merge-{uuid.uuid4().hex[:8]}"
    with KafkaEpochLog(kafka_bootstrap, sink_id) as log:
        log.append(EpochPlan(sink_id=sink_id, epoch=0, parallelism=2, fingerprint="fp"))
        log.append_all(
            [
                EpochCompletion(sink_id, 0, committed=True),
                EpochPlan(sink_id=sink_id, epoch=1, parallelism=2, fingerprint="fp"),
            ]
        )
        log.append_all([])  # nothing to write: no transaction
    history = KafkaEpochLog(kafka_bootstrap, sink_id).load()
    assert history.is_committed(0) and history.plan(1) is not None
    records = _offsets_of(kafka_bootstrap, sink_id)
    assert [k.rsplit("/", 1)[-1] for _, k in records] == ["plan", "completion", "plan"]
    # One transaction: no commit marker (a control record, one offset) between the two.
    (_, _), (second, _), (third, _) = records
    assert third == second + 1


def test_a_refused_record_writes_none_of_its_write(kafka_bootstrap: str) -> None:
    sink_id = f"merge-{uuid.uuid4().hex[:8]}"
    with KafkaEpochLog(kafka_bootstrap, sink_id) as log:
        log.append(EpochPlan(sink_id=sink_id, epoch=0, parallelism=2, fingerprint="fp"))
        with pytest.raises(TxnError, check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION):
            log.append_all(
                [
                    EpochCompletion(sink_id, 0, committed=True),
                    EpochPlan(sink_id=sink_id, epoch=0, parallelism=2, fingerprint="fp"),
                ]
            )
        assert log.load().state(0).in_doubt  # the completion was not written either
    history = KafkaEpochLog(kafka_bootstrap, sink_id).load()
    assert history.state(0).in_doubt and history.completion(0) is None


def test_merged_appends_compact_as_single_ones(kafka_bootstrap: str) -> None:
    sink_id = f"merge-{uuid.uuid4().hex[:8]}"
    log = KafkaEpochLog(kafka_bootstrap, sink_id, retain_epochs=1)
    try:
        log.append(EpochPlan(sink_id=sink_id, epoch=0, parallelism=3, fingerprint="fp"))
        for epoch in range(1, 6):  # each epoch's completion with the next plan
            done = EpochCompletion(sink_id, epoch - 1, committed=True)
            log.append_all(
                [done, EpochPlan(sink_id=sink_id, epoch=epoch, parallelism=1, fingerprint="fp")]
            )
        log.append(EpochCompletion(sink_id, 5, committed=True))
    finally:
        log.close()
    history = KafkaEpochLog(kafka_bootstrap, sink_id).load()
    assert history.epochs() == [4, 5]
    assert history.committed_through == 3
    assert history.max_parallelism() == 3  # from the compacted epoch 0
    assert all(history.is_committed(e) for e in range(6))
