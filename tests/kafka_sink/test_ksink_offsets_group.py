"""``commit_offsets_to_group``: validated at construction; the group metadata needs no broker."""

from __future__ import annotations

import pickle

import pytest
from confluent_kafka import Consumer

from connectors.kafka import KafkaConnectorError, KafkaSink
from connectors.kafka._sink import _input_offsets
from connectors.stage import StageCode, StageError
from txn import EpochPlan, InputOffsets, TxnCode


def test_the_group_option_is_checked_at_construction() -> None:
    with pytest.raises(
        KafkaConnectorError, match="exactly-once", check=lambda e: e.code is TxnCode.CONFIG
    ):
        KafkaSink("b:9092", "out", "s1", guarantee="at-least-once", commit_offsets_to_group="g")
    with pytest.raises(
        KafkaConnectorError, match="marker group", check=lambda e: e.code is TxnCode.CONFIG
    ):
        KafkaSink("b:9092", "out", "s1", commit_offsets_to_group="s1.marker.3")
    with pytest.raises(
        KafkaConnectorError,
        match="commit_offsets_to_group",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        KafkaSink("b:9092", "out", "s1", commit_offsets_to_group="a group")
    sink = KafkaSink("b:9092", "out", "s1", commit_offsets_to_group="s1-lag")
    assert pickle.loads(pickle.dumps(sink.config)).commit_offsets_to_group == "s1-lag"
    # Not part of the fingerprint: adding the group while an epoch is in doubt is allowed.
    assert sink.config.fingerprint() == KafkaSink("b:9092", "out", "s1").config.fingerprint()


def test_group_metadata_is_that_of_a_group_without_members() -> None:
    consumer = Consumer({"group.id": "lag-g"})
    try:
        expected = consumer.consumer_group_metadata()
    finally:
        consumer.close()
    assert _input_offsets.group_metadata("lag-g") == expected
    assert _input_offsets.group_metadata("lag-g") is _input_offsets.group_metadata("lag-g")
    assert _input_offsets.group_metadata("other") != expected


def test_an_epoch_without_kafka_input_is_refused_and_the_end_is_committed() -> None:
    plan = EpochPlan(sink_id="s1", epoch=3, parallelism=2, fingerprint="f")
    with pytest.raises(
        StageError, match="group 'g'", check=lambda e: e.code is StageCode.NOT_KAFKA_INPUT
    ):
        _input_offsets.require_kafka_input(plan, "s1", "g")
    offsets = InputOffsets.of({("in", 0): 5}, {("in", 0): 9, ("in", 1): 4})
    plan = EpochPlan(sink_id="s1", epoch=3, parallelism=2, fingerprint="f", input=offsets)
    _input_offsets.require_kafka_input(plan, "s1", "g")
    got = [(tp.topic, tp.partition, tp.offset) for tp in _input_offsets.group_offsets(plan)]
    assert got == [("in", 0, 9), ("in", 1, 4)]
