import pickle
from dataclasses import replace

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaSink
from connectors.kafka._sink._input import check_input, data_columns, input_layout
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._reuse import ProducerNote, ReuseTicket
from connectors.kafka._sink._writer import RecordLayout
from connectors.stage import InputSpec, StageCode, TaskInfo
from connectors.stage._metrics import TaskStats
from connectors.stage._task import TaskResult, TaskSpec
from connectors.stage._votes import VoteTicket
from txn import EpochPlan, Marker, PartitionReport, Vote
from txn._model import PartitionOutcome, VoteKind

HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def schema(**cols):
    return StructType([StructField(n, t) for n, t in cols.items()])


def cfg(**over):
    args = {"topic": "out", **over}
    return KafkaSink("127.0.0.1:9", args.pop("topic"), "s", **args).config


def test_full_layout_accepted():
    layout = input_layout(
        schema(
            key=BinaryType(),
            value=StringType(),
            topic=StringType(),
            partition=IntegerType(),
            headers=HEADERS,
            extra=LongType(),
        ),
        cfg(),
    )
    assert layout == RecordLayout(key=True, topic=True, partition=True, headers=True)
    assert data_columns(layout) == ["key", "value", "topic", "partition", "headers"]


@pytest.mark.parametrize(
    ("cols", "column", "needle"),
    [
        ({"key": StringType()}, "value", "no 'value' column"),
        ({"value": LongType()}, "value", "cast"),
        ({"value": StringType(), "key": LongType()}, "key", "cast"),
        ({"value": StringType(), "topic": BinaryType()}, "topic", "cast"),
        ({"value": StringType(), "partition": LongType()}, "partition", "cast"),
        ({"value": StringType(), "headers": ArrayType(StringType())}, "headers", "array"),
    ],
)
def test_wrong_columns_are_named(cols, column, needle):
    with pytest.raises(
        KafkaConnectorError, match=needle, check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        input_layout(schema(**cols), cfg())
    assert info.value.column == column


def test_no_topic_anywhere_is_refused():
    with pytest.raises(
        KafkaConnectorError, match="topic", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        input_layout(schema(value=StringType()), cfg(topic=None))
    assert info.value.column == "topic"
    assert input_layout(schema(value=StringType(), topic=StringType()), cfg(topic=None)).topic


def test_changelog_needs_op_and_key():
    c = cfg(changelog=True)
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        input_layout(schema(key=StringType(), value=StringType()), c)
    assert info.value.column == "op"
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        input_layout(schema(value=StringType(), op=StringType()), c)
    assert info.value.column == "key"
    layout = input_layout(schema(key=StringType(), value=StringType(), op=StringType()), c)
    assert layout.changelog and data_columns(layout) == ["key", "value", "op"]


def test_order_by_columns_must_exist():
    with pytest.raises(
        KafkaConnectorError, check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ) as info:
        input_layout(schema(value=StringType()), cfg(order_by=["offset"]))
    assert info.value.column == "offset"


def test_input_spec_routes_by_key_and_falls_back_to_the_value():
    spec = check_input(schema(key=StringType(), value=StringType()), cfg(order_by=["key"]))
    assert spec == InputSpec(
        columns=("key", "value"),
        route_by=("key",),
        fallback=("value",),
        order_by=("key",),
        layout=RecordLayout(key=True),
    )
    keyless = check_input(schema(value=StringType()), cfg())
    assert keyless.route_by == () and keyless.fallback == ("value",)


def test_task_payloads_pickle_round_trip():
    plan = EpochPlan(sink_id="s", epoch=3, parallelism=2, fingerprint="fp")
    reuse = ReuseTicket(
        generation="g",
        stage_run=1,
        known=(ProducerNote(partition=0, lane=1, token="t"),),
        markers=((0, Marker(2, 5, "c")),),
    )
    spec = TaskSpec(
        resource=KafkaResource(cfg=cfg(), layout=RecordLayout(key=True)),
        plan=plan,
        aligned=True,
        tickets=(reuse,),
    )
    assert pickle.loads(pickle.dumps(spec)) == spec
    bound = spec.resource.for_task(TaskInfo(partition=1, task_attempt=2, ticket=reuse))
    assert pickle.loads(pickle.dumps(bound)) == bound
    ticket = VoteTicket(
        host="127.0.0.1",
        port=4242,
        sink_id="s",
        epoch=3,
        plan_attempt=0,
        stage_run=1,
        parallelism=2,
        token="ab" * 16,
    )
    with_votes = replace(spec, votes=ticket)
    assert pickle.loads(pickle.dumps(with_votes)) == with_votes
    placeholders = replace(spec, empty_input=True)
    assert pickle.loads(pickle.dumps(placeholders)).empty_input
    vote = Vote(epoch=3, partition=1, kind=VoteKind.YES, rows=10, checksum="u1")
    report = PartitionReport(
        epoch=3,
        partition=1,
        outcome=PartitionOutcome.COMMITTED,
        rows=10,
        checksum="u1",
        error=None,
        votes=(vote,),
    )
    note = ProducerNote(partition=1, lane=2, token="t", fenced_all=True)
    stats = TaskStats(partition=1, notes=((0, note),), clients_new=1)
    result = TaskResult(partition=1, report=report, stats=stats)
    assert pickle.loads(pickle.dumps(result)) == result


@pytest.mark.parametrize(
    "error",
    [
        KafkaConnectorError("null value", column="value", code=StageCode.RECORD),
        KafkaConnectorError("big", column="key", code=KafkaCode.RECORD_TOO_LARGE),
        KafkaConnectorError("bad", column="op", code=StageCode.INPUT_SCHEMA),
        KafkaConnectorError("w", action="abort", kafka_code=10, code=KafkaCode.WRITE),
        KafkaConnectorError("f", action="fatal", kafka_code=-144, code=KafkaCode.PRODUCER_FENCED),
        KafkaConnectorError(
            "no broker", address="h:9092", setting="bootstrap_servers", code=KafkaCode.CONNECT
        ),
        KafkaConnectorError(
            "refused",
            address="h:9092",
            setting="kafka.bootstrap.servers",
            code=KafkaCode.AUTHENTICATION,
        ),
    ],
)
def test_errors_pickle_round_trip_with_their_fields(error):
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert again.__dict__ == error.__dict__
