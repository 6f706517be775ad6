"""The Kafka sink's bad-record classifier, its dead letters and the dead_letter_topic option."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql import types as T  # noqa: N812 - Spark's customary alias

from connectors.kafka import KafkaConnectorError, SinkConfig
from connectors.kafka._sink._bad_records import (
    DROPPED_HEADERS_HEADER,
    RECORD_OVERHEAD_BYTES,
    TRUNCATED_HEADER,
    TRUNCATED_KEY_HEADER,
    KafkaClassifier,
    dead_letter_batch,
)
from connectors.kafka._sink._input import check_input
from connectors.kafka._sink._writer import RecordLayout
from connectors.stage import DeadLetterContext, StageCode
from connectors.stage._bad_records import bad_batch
from txn import TxnCode


def cfg(**options: object) -> SinkConfig:
    base: dict[str, object] = {
        "bootstrap_servers": "localhost:9092",
        "topic": "out",
        "sink_id": "s",
        "on_bad_record": "dead-letter",
    }
    return SinkConfig.create(**{**base, **options})


def test_dead_letter_topic_defaults_to_topic_dlq_and_is_validated() -> None:
    assert cfg().dead_letter_topic == "out.dlq"
    assert cfg(dead_letter_topic="bad").dead_letter_topic == "bad"
    with pytest.raises(
        KafkaConnectorError,
        match="needs dead_letter_topic",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        cfg(topic=None)
    with pytest.raises(
        KafkaConnectorError, match="only applies", check=lambda e: e.code is TxnCode.CONFIG
    ):
        cfg(on_bad_record="skip", dead_letter_topic="bad")
    with pytest.raises(
        KafkaConnectorError, match="must differ", check=lambda e: e.code is TxnCode.CONFIG
    ):
        cfg(dead_letter_topic="out")
    with pytest.raises(
        KafkaConnectorError,
        match="on_bad_record must be one of",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        cfg(on_bad_record="ignore")
    assert cfg(producer_config={"message.max.bytes": 5000}).message_max_bytes == 5000
    assert pickle.loads(pickle.dumps(cfg())) == cfg()


def test_null_value_and_oversized_record_are_bad_the_rest_good() -> None:
    c = cfg(producer_config={"message.max.bytes": 2000})
    big = "x" * (2000 - RECORD_OVERHEAD_BYTES)
    batch = pa.record_batch(
        [pa.array(["k1", "k2", "k3", "k4"]), pa.array(["v1", None, big, "v4"])],
        names=["key", "value"],
    )
    good, bad = KafkaClassifier(c, RecordLayout(key=True), None).classify(batch)
    assert good.column(1).to_pylist() == ["v1", "v4"]
    assert [(b.index, b.error) for b in bad] == [
        (1, "record"),
        (2, "record-too-large"),
    ]
    assert "message.max.bytes=2000" in bad[1].message
    # deterministic: the same batch, the same verdicts
    assert KafkaClassifier(c, RecordLayout(key=True), None).classify(batch)[1] == bad


def test_headers_count_toward_the_size() -> None:
    c = cfg(producer_config={"message.max.bytes": 1000})
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    headers = pa.array([[{"key": "h", "value": b"y" * 600}], None], type=header_type)
    batch = pa.record_batch([pa.array(["v", "v"]), headers], names=["value", "headers"])
    good, bad = KafkaClassifier(c, RecordLayout(headers=True), None).classify(batch)
    assert [b.index for b in bad] == [0] and good.num_rows == 1


def test_changelog_unknown_op_missing_key_and_tombstones() -> None:
    c = cfg(changelog=True)
    batch = pa.record_batch(
        [
            pa.array(["a", "b", None, "d", "e"]),
            pa.array(["1", "2", "3", None, None]),
            pa.array(["insert", "upsert", "insert", "delete", "insert"]),
        ],
        names=["key", "value", "op"],
    )
    good, bad = KafkaClassifier(c, RecordLayout(key=True, changelog=True), None).classify(batch)
    assert good.column(0).to_pylist() == ["a", "d"]  # the delete's null value is a tombstone
    assert [b.index for b in bad] == [1, 2, 4]
    assert "'upsert'" in bad[0].message


def test_dead_letter_records_carry_the_original_and_the_context_headers() -> None:
    c = cfg(producer_config={"message.max.bytes": 2000})
    big = "x" * 5000
    batch = pa.record_batch(
        [pa.array(["k1", "k2"]), pa.array([None, big]), pa.array([11, 12], pa.int64())],
        names=["key", "value", "_eos_hash"],
    )
    _, bad = KafkaClassifier(c, RecordLayout(key=True), None).classify(batch)
    records = bad_batch(batch, bad)
    out = dead_letter_batch(
        records,
        DeadLetterContext(sink_id="s", epoch=5, partition=2, batch_id=9),
        c.topic,
        c.message_max_bytes,
    )
    keys, values, headers = (out.column(i).to_pylist() for i in range(3))
    assert keys == [b"k1", b"k2"] and values[0] is None
    assert len(values[1]) < 2000 - RECORD_OVERHEAD_BYTES and big.encode().startswith(values[1])
    first = {h["key"]: h["value"] for h in headers[0]}
    assert first["eos.dlq.error.class"] == b"record"
    assert (
        first["eos.dlq.batch.id"],
        first["eos.dlq.epoch"],
        first["eos.dlq.write.partition"],
    ) == (
        b"9",
        b"5",
        b"2",
    )
    assert first["eos.dlq.topic"] == b"out"
    second = {h["key"]: h["value"] for h in headers[1]}
    assert second[TRUNCATED_HEADER] == b"5000"


def test_a_dead_letter_of_an_oversized_key_is_cut_to_fit_too() -> None:
    c = cfg(producer_config={"message.max.bytes": 2000})
    key, value = "k" * 3000, "v" * 3000
    batch = pa.record_batch(
        [pa.array([key]), pa.array([value]), pa.array([11], pa.int64())],
        names=["key", "value", "_eos_hash"],
    )
    _, bad = KafkaClassifier(c, RecordLayout(key=True), None).classify(batch)
    out = dead_letter_batch(
        bad_batch(batch, bad),
        DeadLetterContext(sink_id="s", epoch=5, partition=2, batch_id=9),
        c.topic,
        c.message_max_bytes,
    )
    [k], [v], [headers] = (out.column(i).to_pylist() for i in range(3))
    lengths = {h["key"]: h["value"] for h in headers}
    assert (lengths[TRUNCATED_KEY_HEADER], lengths[TRUNCATED_HEADER]) == (b"3000", b"3000")
    assert key.encode().startswith(k) and v == b""
    size = len(k) + sum(len(h["key"]) + len(h["value"]) for h in headers)
    assert size <= 2000 - RECORD_OVERHEAD_BYTES  # the dead letter itself is not too large


SOURCE = ("in_topic", "in_partition", "in_offset")


def test_dead_letter_source_is_validated_at_construction() -> None:
    assert cfg(dead_letter_source=list(SOURCE)).dead_letter_source == SOURCE
    assert cfg().dead_letter_source is None
    with pytest.raises(
        KafkaConnectorError, match="only applies", check=lambda e: e.code is TxnCode.CONFIG
    ):
        cfg(on_bad_record="skip", dead_letter_source=SOURCE)
    with pytest.raises(
        KafkaConnectorError, match="three input columns", check=lambda e: e.code is TxnCode.CONFIG
    ):
        cfg(dead_letter_source=("in_topic", "in_partition"))
    with pytest.raises(
        KafkaConnectorError, match="three input columns", check=lambda e: e.code is TxnCode.CONFIG
    ):
        cfg(dead_letter_source="in_topic")
    with pytest.raises(
        KafkaConnectorError,
        match="other than the sink's own",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        cfg(dead_letter_source=("topic", "in_partition", "in_offset"))
    with pytest.raises(
        KafkaConnectorError, match="distinct", check=lambda e: e.code is TxnCode.CONFIG
    ):
        cfg(dead_letter_source=("a", "a", "b"))
    with_source = cfg(dead_letter_source=SOURCE)
    assert pickle.loads(pickle.dumps(with_source)) == with_source


def test_dead_letter_source_columns_are_shipped_only_when_set() -> None:
    schema = T.StructType(
        [
            T.StructField("value", T.StringType()),
            T.StructField("in_topic", T.StringType()),
            T.StructField("in_partition", T.IntegerType()),
            T.StructField("in_offset", T.LongType()),
        ]
    )
    plain, with_source = cfg(), cfg(dead_letter_source=SOURCE)
    assert check_input(schema, plain).columns == ("value",)
    assert check_input(schema, with_source).columns == ("value", *SOURCE)
    # a sink without the option keeps its fingerprint (epochs in doubt replay as before)
    assert plain.fingerprint() == cfg(producer_config={"linger.ms": 5}).fingerprint()
    assert with_source.fingerprint() != plain.fingerprint()
    missing = T.StructType(schema.fields[:3])
    with pytest.raises(
        KafkaConnectorError,
        match="'in_offset'.*does not have",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ):
        check_input(missing, with_source)
    wrong = T.StructType([*schema.fields[:3], T.StructField("in_offset", T.StringType())])
    with pytest.raises(
        KafkaConnectorError,
        match="in_offset.*has type string",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ):
        check_input(wrong, with_source)


def test_dead_letters_carry_the_source_coordinates() -> None:
    c = cfg(dead_letter_source=SOURCE)
    batch = pa.record_batch(
        [
            pa.array([None, None], pa.string()),
            pa.array(["in", None]),
            pa.array([3, None], pa.int32()),
            pa.array([1234567890123, None], pa.int64()),
            pa.array([11, 12], pa.int64()),
        ],
        names=["value", *SOURCE, "_eos_hash"],
    )
    _, bad = KafkaClassifier(c, RecordLayout(), None).classify(batch)
    out = dead_letter_batch(
        bad_batch(batch, bad),
        DeadLetterContext(sink_id="s", epoch=5, partition=2, batch_id=9),
        c.topic,
        c.message_max_bytes,
        SOURCE,
    )
    first, second = ({h["key"]: h["value"] for h in row} for row in out.column(2).to_pylist())
    assert (
        first["eos.dlq.source.topic"],
        first["eos.dlq.source.partition"],
        first["eos.dlq.source.offset"],
    ) == (b"in", b"3", b"1234567890123")
    assert not any(k.startswith("eos.dlq.source.") for k in second)  # nulls are left out
    assert first["eos.dlq.epoch"] == b"5"


def test_oversized_original_headers_are_dropped_from_a_dead_letter() -> None:
    c = cfg(producer_config={"message.max.bytes": 2000})
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    originals = [{"key": "small", "value": b"s"}, {"key": "big", "value": b"y" * 3000}]
    originals.append({"key": "after", "value": b"a"})
    batch = pa.record_batch(
        [
            pa.array(["k"]),
            pa.array(["v"]),
            pa.array([originals], type=header_type),
            pa.array([11], pa.int64()),
        ],
        names=["key", "value", "headers", "_eos_hash"],
    )
    _, bad = KafkaClassifier(c, RecordLayout(key=True, headers=True), None).classify(batch)
    assert [b.error for b in bad] == ["record-too-large"]
    out = dead_letter_batch(
        bad_batch(batch, bad),
        DeadLetterContext(sink_id="s", epoch=5, partition=2, batch_id=9),
        c.topic,
        c.message_max_bytes,
    )
    [k], [v], [headers] = (out.column(i).to_pylist() for i in range(3))
    keys = [h["key"] for h in headers]
    assert keys[0] == "small" and "big" not in keys and "after" not in keys
    found = {h["key"]: h["value"] for h in headers}
    assert found[DROPPED_HEADERS_HEADER] == b"2"
    assert (k, v) == (b"k", b"v")  # key and value kept whole: they fit once headers are gone
    size = len(k) + len(v) + sum(len(h["key"]) + len(h["value"]) for h in headers)
    assert size <= 2000 - RECORD_OVERHEAD_BYTES  # the dead letter itself is not too large
    # headers that fit are all kept, with no drop header
    small = pa.record_batch(
        [
            pa.array(["k"]),
            pa.array([None], pa.string()),
            pa.array([originals[:1]], type=header_type),
            pa.array([11], pa.int64()),
        ],
        names=["key", "value", "headers", "_eos_hash"],
    )
    _, bad = KafkaClassifier(c, RecordLayout(key=True, headers=True), None).classify(small)
    out = dead_letter_batch(
        bad_batch(small, bad),
        DeadLetterContext(sink_id="s", epoch=5, partition=2, batch_id=9),
        c.topic,
        c.message_max_bytes,
    )
    [headers] = out.column(2).to_pylist()
    assert headers[0]["key"] == "small" and DROPPED_HEADERS_HEADER not in {
        h["key"] for h in headers
    }
