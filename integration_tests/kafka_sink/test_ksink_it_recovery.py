"""KafkaSink recovery paths with real Spark and a real broker (no process kills here).

Each test of a sink's recovery runs under both producer strategies (the
``producer_strategy`` fixture): a new producer per task, and producers kept across epochs.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition

from connectors.kafka import KafkaConnectorError, KafkaEpochLog, KafkaSink, read_markers
from connectors.testing import FaultPlan, InjectedFault, inject_faults
from integration_tests.kafka_sink._support import (
    after_partition_commits,
    expected,
    lso_reaches_high_watermark,
    read_committed,
    rows,
    sid,
    values,
)
from txn import EpochCompletion, EpochPlan, QueryBinding, TxnCode, TxnError
from txn._model import PartitionOutcome

pytestmark = pytest.mark.spark


def last_epoch(sink):
    """The metrics of the sink's latest call (failed calls are kept too)."""
    return sink.metrics()[-1]


def fault_plan(tmp_path, *faults):
    path = tmp_path / f"faults-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(list(faults)))
    return FaultPlan(str(path))


@pytest.mark.compat
def test_in_doubt_epoch_is_skipped_by_markers_on_replay(
    spark, kafka_bootstrap, new_topic, tmp_path, producer_strategy
):
    topic = new_topic("ks-doubt", partitions=2)
    sink_id = sid()
    faults = fault_plan(
        tmp_path, {"id": "d", "step": "driver_before_complete", "epoch": 0, "action": "raise"}
    )
    sink = KafkaSink(kafka_bootstrap, topic, sink_id, producer_strategy=producer_strategy)
    try:
        with inject_faults(faults):
            with pytest.raises(InjectedFault):
                sink(rows(spark, 400), 0)  # every partition committed; completion not logged
            assert faults.has_fired("d")
            assert not sink.epoch_log_history().is_committed(0)
            result = sink(rows(spark, 400), 0)  # the replay
            assert {r.outcome for r in result.reports} == {PartitionOutcome.ALREADY_COMMITTED}
            assert result.plan is not None and result.plan.attempt == 1
            assert last_epoch(sink).stage_runs == 1  # the stage ran again, to find markers
            assert sink.epoch_log_history().is_committed(0)
    finally:
        sink.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(400)


def test_non_deterministic_replay_raises(
    spark, kafka_bootstrap, new_topic, tmp_path, producer_strategy
):
    topic = new_topic("ks-nondet", partitions=2)
    faults = fault_plan(
        tmp_path, {"id": "d", "step": "driver_before_complete", "epoch": 0, "action": "raise"}
    )
    sink = KafkaSink(kafka_bootstrap, topic, sid(), producer_strategy=producer_strategy)
    try:
        with inject_faults(faults):
            with pytest.raises(InjectedFault):
                sink(rows(spark, 100), 0)
            assert faults.has_fired("d")
            changed = rows(spark, 100).selectExpr("key", "concat(value, '!') AS value")
            with pytest.raises(
                TxnError,
                match="deterministic",
                check=lambda e: e.code is TxnCode.NON_DETERMINISTIC_REPLAY,
            ):
                sink(changed, 0)
            assert not sink.epoch_log_history().is_committed(0)
    finally:
        sink.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(100)  # no duplicate


def test_unaligned_failure_keeps_committed_parts_and_redoes_the_rest(
    spark, kafka_bootstrap, new_topic, tmp_path, producer_strategy
):
    topic = new_topic("ks-unal", partitions=2)
    faults = fault_plan(
        tmp_path,
        # partition 1 fails only once partition 0 has committed on its own
        *after_partition_commits(epoch=0),
        {
            "id": "m",
            "step": "mid_write",
            "epoch": 0,
            "partition": 1,
            "after_rows": 50,
            "action": "raise",
        },
    )
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        sid(),
        mode="unaligned",
        parallelism=2,
        stage_retries=0,
        producer_strategy=producer_strategy,
    )
    try:
        with inject_faults(faults):
            with pytest.raises(Exception, match="injected fault"):
                sink(rows(spark, 600), 0)
            assert faults.has_fired("m")
            partial = read_committed(kafka_bootstrap, topic)
            assert 0 < len(partial) < 600  # partition 0 committed on its own (unaligned)
            result = sink(rows(spark, 600), 0)
            outcomes = {r.partition: r.outcome for r in result.reports}
            assert outcomes == {
                0: PartitionOutcome.ALREADY_COMMITTED,
                1: PartitionOutcome.COMMITTED,
            }
            redo = last_epoch(sink)
            assert (redo.plan_attempt, redo.stage_runs, redo.partitions_redone) == (1, 1, 1)
    finally:
        sink.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(600)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


@pytest.mark.parametrize("channel", ["driver", "barrier"])
def test_aligned_failure_before_the_vote_leaves_nothing_visible(
    spark, kafka_bootstrap, new_topic, tmp_path, channel, producer_strategy
):
    topic = new_topic("ks-al", partitions=2)
    faults = fault_plan(
        tmp_path,
        {"id": "p", "step": "after_pre_commit", "epoch": 0, "partition": 1, "action": "raise"},
    )
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        sid(),
        parallelism=2,
        stage_retries=0,
        vote_channel=channel,
        producer_strategy=producer_strategy,
    )
    try:
        with inject_faults(faults):
            with pytest.raises(Exception, match="injected fault"):
                sink(rows(spark, 300), 0)
            assert faults.has_fired("p")
            assert read_committed(kafka_bootstrap, topic) == []
            result = sink(rows(spark, 300), 0)
            assert {r.outcome for r in result.reports} == {PartitionOutcome.COMMITTED}
            redo = last_epoch(sink)
            assert (redo.plan_attempt, redo.stage_runs, redo.partitions_redone) == (1, 1, 2)
    finally:
        sink.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(300)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


@pytest.mark.parametrize("channel", ["driver", "barrier"])
def test_stage_retries_redo_a_failed_aligned_stage_within_the_call(
    spark, kafka_bootstrap, new_topic, tmp_path, channel, producer_strategy
):
    topic = new_topic("ks-retry", partitions=2)
    faults = fault_plan(
        tmp_path,
        {"id": "c", "step": "before_commit", "epoch": 0, "partition": 0, "action": "raise"},
    )
    # the default stage_retries (2) re-runs the failed barrier stage within the call
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        sid(),
        parallelism=2,
        vote_channel=channel,
        producer_strategy=producer_strategy,
    )
    try:
        with inject_faults(faults):
            result = sink(rows(spark, 200), 0)  # the first stage fails, the retry finishes it
            assert faults.has_fired("c"), "the first stage never failed: nothing was retried"
            assert result.committed
            assert result.reports[0].outcome is PartitionOutcome.COMMITTED
            metrics = last_epoch(sink)  # one call: the failed stage run and its re-run
            assert (metrics.stage_runs, metrics.aborted_attempts) == (2, 1)
    finally:
        sink.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(200)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


def test_task_dying_between_decision_and_commit_is_redone(
    spark, kafka_bootstrap, new_topic, tmp_path, producer_strategy
):
    topic = new_topic("ks-dec", partitions=2)
    faults = fault_plan(
        tmp_path,
        {"id": "c", "step": "before_commit", "epoch": 0, "partition": 1, "action": "raise"},
    )
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        sid(),
        parallelism=2,
        stage_retries=0,
        producer_strategy=producer_strategy,
    )
    try:
        with inject_faults(faults):
            with pytest.raises(Exception, match="injected fault"):
                sink(rows(spark, 300), 0)
            assert faults.has_fired("c")
            # partition 1's pre-committed transaction is still open: the replay's
            # init_transactions aborts it and redoes the partition.
            result = sink(rows(spark, 300), 0)
            outcomes = {r.partition: r.outcome for r in result.reports}
            assert outcomes[1] is PartitionOutcome.COMMITTED
            assert last_epoch(sink).plan_attempt == 1  # the epoch's plan was run again
    finally:
        sink.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(300)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


def test_lingering_transactions_beyond_current_parallelism_are_aborted_at_start_up(
    spark, kafka_bootstrap, new_topic, producer_strategy
):
    topic = new_topic("ks-linger", partitions=1)
    sink_id = sid()
    wide = KafkaSink(
        kafka_bootstrap,
        topic,
        sink_id,
        mode="unaligned",
        parallelism=4,
        producer_strategy=producer_strategy,
    )
    try:
        wide(rows(spark, 100), 0)
    finally:
        wide.close()
    # Zombies of write partition 3 on the shared lane and on worker lane 2 (the highest of
    # the default 2) leave open transactions behind.
    zombies = [
        Producer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "transactional.id": f"{sink_id}-3{lane}",
                "transaction.timeout.ms": "600000",
            }
        )
        for lane in ("", ".2")
    ]
    for zombie in zombies:
        zombie.init_transactions(60)
        zombie.begin_transaction()
        zombie.produce(topic, b"zombie", b"z")
        assert zombie.flush(30) == 0
    assert not lso_reaches_high_watermark(kafka_bootstrap, topic)
    narrow = KafkaSink(
        kafka_bootstrap,
        topic,
        sink_id,
        mode="unaligned",
        parallelism=2,
        producer_strategy=producer_strategy,
    )
    try:
        narrow(rows(spark, 100, start=100), 1)  # recover() aborts every lane of 0..3 first
    finally:
        narrow.close()
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)
    assert values(read_committed(kafka_bootstrap, topic)) == expected(200)
    for zombie in zombies:
        with pytest.raises(KafkaException):
            zombie.commit_transaction(30)  # fenced: the zombie can never commit
    markers = read_markers(kafka_bootstrap, sink_id, 4)
    assert markers[3] is not None and markers[3].epoch == 0
    assert markers[0] is not None and markers[0].epoch == 1


def test_kafka_epoch_log_fences_a_second_coordinator(kafka_bootstrap):
    sink_id = sid()
    first = KafkaEpochLog(kafka_bootstrap, sink_id)
    second = KafkaEpochLog(kafka_bootstrap, sink_id)
    try:
        first.append(EpochPlan(sink_id=sink_id, epoch=0, parallelism=2, fingerprint="fp"))
        assert second.load().plan(0) is not None  # reading never fences
        first.append(EpochCompletion(sink_id, 0, committed=True))
        second.append(
            EpochPlan(sink_id=sink_id, epoch=1, parallelism=2, fingerprint="fp")
        )  # takes over: fences `first`
        with pytest.raises(
            KafkaConnectorError,
            match="another coordinator",
            check=lambda e: e.code is TxnCode.EPOCH_LOG_LOCKED,
        ):
            first.append(
                EpochPlan(sink_id=sink_id, epoch=1, parallelism=3, fingerprint="fp")
            )  # legal in first's view, but fenced
        second.append(EpochCompletion(sink_id, 1, committed=True))
    finally:
        first.close()
        second.close()
    reader = KafkaEpochLog(kafka_bootstrap, sink_id)
    history = reader.load()
    assert history.is_committed(0) and history.is_committed(1)
    assert history.max_parallelism() == 2
    reader.close()


def test_kafka_epoch_log_refuses_an_illegal_record_as_every_epoch_log_does(kafka_bootstrap):
    # A new query's binding while epoch 1 is in doubt (what `eos reset` would append): the
    # typed refusal of the history, not "the log could not be written"; nothing written.
    sink_id = sid()
    with KafkaEpochLog(kafka_bootstrap, sink_id) as log:
        log.append(EpochPlan(sink_id=sink_id, epoch=0, parallelism=2, fingerprint="fp"))
        log.append(EpochCompletion(sink_id, 0, committed=True))
        log.append(EpochPlan(sink_id=sink_id, epoch=1, parallelism=2, fingerprint="fp"))
        with pytest.raises(
            TxnError,
            match="epoch 1 is not committed",
            check=lambda e: e.code is TxnCode.ILLEGAL_TRANSITION,
        ):
            log.append(QueryBinding(sink_id, "q-2", 2))
        log.append(EpochCompletion(sink_id, 1, committed=True))  # the log is still usable
    history = KafkaEpochLog(kafka_bootstrap, sink_id).load()
    assert history.binding is None and history.is_committed(1)


def test_kafka_epoch_log_compaction_keeps_the_floor(kafka_bootstrap):
    sink_id = sid()
    log = KafkaEpochLog(kafka_bootstrap, sink_id, retain_epochs=2)
    try:
        for epoch in range(6):
            log.append(
                EpochPlan(
                    sink_id=sink_id,
                    epoch=epoch,
                    parallelism=3 if epoch == 0 else 1,
                    fingerprint="fp",
                )
            )
            log.append(EpochCompletion(sink_id, epoch, committed=True))
    finally:
        log.close()
    history = KafkaEpochLog(kafka_bootstrap, sink_id).load()
    assert history.epochs() == [3, 4, 5]
    assert history.committed_through == 2
    assert history.max_parallelism() == 3  # from the compacted epoch 0
    assert all(history.is_committed(e) for e in range(6))


def test_kafka_epoch_log_is_read_whole_when_the_topic_no_longer_starts_at_offset_0(
    kafka_bootstrap, new_topic, kafka_admin
):
    # The log is read from offset 0 (faster than "beginning"); records deleted below the
    # log start must make the reader start at the log start, never at the end.
    topic = new_topic("log", 1, {"cleanup.policy": "compact"})
    other = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(3):
        other.produce(topic, b"x", f"another-sink/{i}".encode())
    assert other.flush(30) == 0
    start = TopicPartition(topic, 0, 3)
    kafka_admin.delete_records([start])[start].result(30)
    sink_id = sid()
    with KafkaEpochLog(kafka_bootstrap, sink_id, topic=topic) as log:
        log.append(EpochPlan(sink_id=sink_id, epoch=0, parallelism=2, fingerprint="fp"))
        log.append(EpochCompletion(sink_id, 0, committed=True))
    history = KafkaEpochLog(kafka_bootstrap, sink_id, topic=topic, create_topic=False).load()
    assert history.is_committed(0) and history.max_parallelism() == 2
