import pickle

import pytest

from connectors.kafka import KafkaCode, KafkaConnectorError
from connectors.kafka._source import KafkaOffsets, OffsetBound, SourceOptions
from connectors.kafka._source._options import OffsetFetchRetry

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
    assert opts.stream_starting() == OffsetBound(kind="latest")
    assert opts.batch_bounds() == (OffsetBound(kind="earliest"), OffsetBound(kind="latest"))


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
        ({**BASE, "startingOffset": "earliest"}, "did you mean 'startingOffsets'?"),
        ({**BASE, "maxOffsetPerTrigger": "5"}, "did you mean 'maxOffsetsPerTrigger'?"),
        ({**BASE, "startingTimeStamps": "5"}, "did you mean 'startingTimestamp'?"),
        ({**BASE, "fetchOffsets.numRetry": "5"}, "did you mean 'fetchOffset.numRetries'?"),
        ({**BASE, "bootstrap.servers": "x"}, "'kafka.' prefix (e.g. 'kafka.bootstrap.servers')"),
        ({**BASE, "startingTimestamp": "-1"}, "'startingTimestamp' takes a timestamp"),
        ({**BASE, "endingTimestamp": "yesterday"}, "'endingTimestamp' takes a timestamp"),
        ({**BASE, "startingOffsetsByTimestamp": '{"orders": {"0": -1}}'}, "allowed: >= 0"),
        ({**BASE, "startingOffsetsByTimestamp": "{}"}, "names no topic-partition"),
        ({**BASE, "endingOffsetsByTimestamp": '{"x": {"0": 5}}'}, "outside the subscription"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "earliest"}, "one of ('error', 'latest')"),
        ({**BASE, "minOffsetsPerTrigger": "0"}, "'minOffsetsPerTrigger' must be a positive"),
        (
            {**BASE, "minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"},
            "'minOffsetsPerTrigger' (50) is higher than 'maxOffsetsPerTrigger' (10)",
        ),
        ({**BASE, "maxTriggerDelay": "5 fortnights"}, "'maxTriggerDelay' takes a duration"),
        ({**BASE, "maxTriggerDelay": "-5s"}, "'maxTriggerDelay' takes a duration"),
        ({**BASE, "maxRecordsPerPartition": "0"}, "'maxRecordsPerPartition' must be a positive"),
        ({**BASE, "fetchOffset.numRetries": "0"}, "'fetchOffset.numRetries' must be a positive"),
        ({**BASE, "fetchOffset.retryIntervalMs": "-1"}, "must be an integer >= 0"),
        ({**BASE, "kafkaConsumer.cache.capacity": "lots"}, "must be an integer >= 0"),
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
    with pytest.raises(
        KafkaConnectorError, match=None, check=lambda e: e.code is KafkaCode.SOURCE_OPTION
    ) as info:
        SourceOptions.from_options(options)
    assert needle in str(info.value)
    assert not info.value.retry_stage


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("endingOffsets", "latest"),
        ("endingTimestamp", "1700000000000"),
        ("endingOffsetsByTimestamp", '{"orders": {"0": 1700000000000}}'),
    ],
)
def test_stream_rejects_every_ending_option_naming_it(option: str, value: str) -> None:
    opts = parse(**{option: value})
    with pytest.raises(
        KafkaConnectorError,
        match=f"option '{option}' is only valid for batch",
        check=lambda e: e.code is KafkaCode.SOURCE_OPTION,
    ):
        opts.stream_starting()


def test_timestamps_take_precedence_as_in_spark() -> None:
    everything = {
        "startingOffsets": "earliest",
        "startingOffsetsByTimestamp": '{"orders": {"0": 20, "1": 30}}',
        "startingTimestamp": "10",
        "endingOffsets": "latest",
        "endingOffsetsByTimestamp": '{"orders": {"0": 50, "1": 60}}',
        "endingTimestamp": "40",
    }
    start, end = parse(**everything).batch_bounds()
    assert (start.kind, start.timestamp, start.option) == ("timestamp", 10, "startingTimestamp")
    assert (start.no_match, end.no_match) == ("error", "latest")
    assert (end.kind, end.timestamp, end.option) == ("timestamp", 40, "endingTimestamp")
    del everything["startingTimestamp"], everything["endingTimestamp"]
    start, end = parse(**everything).batch_bounds()
    assert start.timestamp is None and start.by_partition
    assert start.offsets.as_dict() == {("orders", 0): 20, ("orders", 1): 30}
    assert end.offsets.as_dict() == {("orders", 0): 50, ("orders", 1): 60}
    latest = parse(startingTimestamp="5", startingOffsetsByTimestampStrategy="LATEST")
    assert latest.stream_starting().no_match == "latest"


def test_trigger_partition_retry_and_cache_options() -> None:
    defaults = parse()
    assert defaults.min_offsets_per_trigger is None
    assert defaults.max_trigger_delay_ms == 15 * 60 * 1000  # Spark's 15m
    assert defaults.max_records_per_partition is None
    assert defaults.fetch_retry is None  # the source's own outage bounds
    assert defaults.consumer_cache_capacity == 64  # Spark's consumer cache capacity
    opts = parse(
        minOffsetsPerTrigger="10",
        maxOffsetsPerTrigger="10",
        maxTriggerDelay="30s",
        maxRecordsPerPartition="1000",
        **{"fetchOffset.numRetries": "5", "kafkaConsumer.cache.capacity": "0"},
    )
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (10, 30_000)
    assert opts.max_records_per_partition == 1000
    assert opts.fetch_retry == OffsetFetchRetry(attempts=5, interval_ms=10)  # Spark's 10 ms
    assert opts.consumer_cache_capacity == 0
    only_interval = parse(**{"fetchOffset.retryIntervalMs": "0"})
    assert only_interval.fetch_retry == OffsetFetchRetry(attempts=3, interval_ms=0)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("15m", 900_000),
        ("2min", 120_000),
        ("30s", 30_000),
        ("500ms", 500),
        ("500", 500),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("2000us", 2),
        (" 0 ", 0),
    ],
)
def test_max_trigger_delay_reads_sparks_time_strings(text: str, ms: int) -> None:
    assert parse(maxTriggerDelay=text).max_trigger_delay_ms == ms


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
    with pytest.raises(
        KafkaConnectorError, match=needle, check=lambda e: e.code is KafkaCode.SOURCE_OPTION
    ):
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
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is KafkaCode.SOURCE_OPTION):
        opts.batch_bounds()  # -1 in startingOffsets is invalid for batch


def test_options_pickle_round_trip() -> None:
    opts = parse(
        startingOffsets='{"orders": {"0": 5, "1": -2}}',
        maxOffsetsPerTrigger="100",
        minPartitions="4",
        failOnDataLoss="false",
        commitOffsetsToGroup="lag-monitor",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="1m",
        maxRecordsPerPartition="7",
        endingTimestamp="123",
        **{"kafka.client.id": "x", "fetchOffset.numRetries": "2"},
    )
    clone = pickle.loads(pickle.dumps(opts))
    assert clone == opts
    assert hash(clone) == hash(opts)
    assert clone.starting_offsets == OffsetBound(
        kind="specific",
        offsets=KafkaOffsets.from_mapping({("orders", 0): 5, ("orders", 1): -2}),
        option="startingOffsets",
    )
    assert clone.ending_offsets == OffsetBound(
        kind="timestamp", timestamp=123, no_match="latest", option="endingTimestamp"
    )
    assert clone.fetch_retry == OffsetFetchRetry(attempts=2, interval_ms=10)


def test_options_are_frozen() -> None:
    opts = parse()
    with pytest.raises(AttributeError):
        opts.include_headers = True  # type: ignore[misc]
