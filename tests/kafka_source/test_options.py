import pickle

import pytest

from connectors.kafka._source import (
    KafkaOffsets,
    OffsetBound,
    SourceOptionError,
    SourceOptions,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


def parse(**extra: str) -> SourceOptions:
    return SourceOptions.from_options({**BASE, **extra})


def test_defaults_follow_spark() -> None:
    opts = parse()
    assert opts.bootstrap_servers == "127.0.0.1:9092"
    assert opts.subscription.kind == "subscribe"
    assert opts.subscription.topics == ("orders",)
    assert opts.fail_on_data_loss is True
    assert opts.include_headers is False
    assert opts.isolation_level == "read_committed"
    assert opts.stream_starting() == OffsetBound("latest")
    assert opts.batch_bounds() == (OffsetBound("earliest"), OffsetBound("latest"))


def test_keys_are_case_insensitive_like_spark() -> None:
    opts = SourceOptions.from_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "SubscribePattern": "ord.*",
            "MAXOFFSETSPERTRIGGER": "10",
            "includeheaders": "TRUE",
        }
    )
    assert opts.subscription.kind == "subscribePattern"
    assert opts.subscription.matches("orders")
    assert not opts.subscription.matches("xorders")  # full match, like Java's matches()
    assert opts.max_offsets_per_trigger == 10
    assert opts.include_headers is True


def test_kafka_passthrough_and_managed_consumer_settings() -> None:
    opts = parse(**{"kafka.fetch.max.bytes": "1048576", "kafka.client.id": "me"})
    conf = opts.consumer_config("g1")
    shared = opts.consumer_cluster().config.as_dict()
    assert shared["fetch.max.bytes"] == "1048576"
    assert shared["client.id"] == "me"
    assert conf["isolation.level"] == "read_committed"
    assert conf["enable.auto.commit"] == "false"
    assert conf["auto.offset.reset"] == "error"
    assert conf["group.id"] == "g1"
    admin = opts.consumer_cluster(admin=True)
    assert "fetch.max.bytes" not in admin.config.as_dict()
    assert admin.config.as_dict()["client.id"] == "me"
    assert admin.bootstrap_servers == opts.bootstrap_servers
    assert admin.address_option == "kafka.bootstrap.servers"


def test_security_options_reach_every_client_and_stay_out_of_the_repr() -> None:
    opts = parse(
        **{
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.username": "u",
            "kafka.sasl.password": "SENTINEL-source",
            "kafka.group.id": "mine",
        }
    )
    for cluster in (opts.consumer_cluster(), opts.consumer_cluster(admin=True)):
        assert cluster.config.as_dict()["sasl.password"] == "SENTINEL-source"
        assert cluster.security_protocol == "SASL_SSL"
    assert opts.consumer_config("g")["group.id"] == "mine"
    assert "SENTINEL" not in repr(opts) and "SENTINEL" not in str(opts.consumer_cluster())
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_read_uncommitted_can_be_chosen_explicitly() -> None:
    opts = parse(**{"kafka.isolation.level": "read_uncommitted"})
    assert opts.isolation_level == "read_uncommitted"
    assert opts.consumer_config("g")["isolation.level"] == "read_uncommitted"


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"subscribe": "a"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, "exactly one of"),
        ({**BASE, "assign": '{"a":[0]}'}, "exactly one of"),
        ({**BASE, "subscribe": "a,,b"}, "comma-separated"),
        ({**BASE, "startingOffset": "earliest"}, "unknown option 'startingoffset'"),
        ({**BASE, "bootstrap.servers": "x"}, "'kafka.' prefix"),
        ({**BASE, "minOffsetsPerTrigger": "5"}, "not supported by kafka-rc"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "commitOffsetsToGroup"),
        ({**BASE, "kafka.value.deserializer": "x"}, "binary"),
        ({**BASE, "kafka.isolation.level": "serializable"}, "isolation.level"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, "positive integer"),
        ({**BASE, "minPartitions": "many"}, "positive integer"),
        ({**BASE, "failOnDataLoss": "yes"}, "'true' or 'false'"),
        ({**BASE, "startingOffsets": "beginning"}, "expected 'earliest'"),
        ({**BASE, "startingOffsets": '{"orders": {"0": -3}}'}, "allowed"),
        ({**BASE, "startingOffsets": '{"orders": {"x": 1}}'}, "partition key"),
        ({**BASE, "startingOffsets": '{"orders": [1]}'}, "expected JSON"),
        ({**BASE, "startingOffsets": "{not json"}, "not valid JSON"),
        ({**BASE, "startingOffsets": '{"other": {"0": 1}}'}, "outside the subscription"),
        ({**BASE, "commitOffsetsToGroup": "true"}, "consumer group id"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribePattern": "(unclosed"},
            "regular expression",
        ),
        ({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [0, -1]}'}, "'assign' must be"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[0]"}, "'assign' must be"),
        (
            {
                "kafka.bootstrap.servers": "h:1",
                "assign": '{"a": [0, 1]}',
                "startingOffsets": '{"a": {"0": 5}}',
            },
            "exactly the assigned partitions",
        ),
    ],
)
def test_bad_options_raise_typed_error_naming_the_fix(options: dict[str, str], needle: str) -> None:
    with pytest.raises(SourceOptionError, match=None) as info:
        SourceOptions.from_options(options)
    assert needle in str(info.value)
    assert isinstance(info.value, ValueError)


def test_stream_rejects_ending_offsets() -> None:
    opts = parse(endingOffsets="latest")
    with pytest.raises(SourceOptionError, match="endingOffsets"):
        opts.stream_starting()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"startingOffsets": '{"orders": {"0": -1}}'}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"endingOffsets": '{"orders": {"0": -2}}'}, "endingOffsets"),
    ],
)
def test_batch_rejects_what_spark_rejects(extra: dict[str, str], needle: str) -> None:
    with pytest.raises(SourceOptionError, match=needle):
        parse(**extra).batch_bounds()


def test_assign_and_specific_offsets() -> None:
    opts = SourceOptions.from_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "assign": '{"b": [1, 0], "a": [2]}',
            "startingOffsets": '{"a": {"2": -2}, "b": {"0": 7, "1": -1}}',
            "endingOffsets": '{"a": {"2": -1}, "b": {"0": 9, "1": -1}}',
        }
    )
    assert opts.subscription.partitions == (("a", 2), ("b", 0), ("b", 1))
    start = opts.starting_offsets
    assert start is not None and start.kind == "specific"
    assert start.offsets.as_dict() == {("a", 2): -2, ("b", 0): 7, ("b", 1): -1}
    with pytest.raises(SourceOptionError):
        opts.batch_bounds()  # -1 in startingOffsets is invalid for batch


def test_options_pickle_round_trip() -> None:
    opts = parse(
        startingOffsets='{"orders": {"0": 5, "1": -2}}',
        maxOffsetsPerTrigger="100",
        minPartitions="4",
        failOnDataLoss="false",
        commitOffsetsToGroup="lag-monitor",
        **{"kafka.client.id": "x"},
    )
    clone = pickle.loads(pickle.dumps(opts))
    assert clone == opts
    assert hash(clone) == hash(opts)
    assert clone.starting_offsets == OffsetBound(
        "specific", KafkaOffsets.from_mapping({("orders", 0): 5, ("orders", 1): -2})
    )


def test_options_are_frozen() -> None:
    opts = parse()
    with pytest.raises(AttributeError):
        opts.include_headers = True  # type: ignore[misc]
